"""Label the recipes' programs by running them: each rank's training step (or forward) on a
real gloo process group, one forked process per rank, against the single-device program.
A label is a fact about PyTorch, not about shardproof's rules."""
from __future__ import annotations

import importlib.util
import inspect
import os
import sys

import numpy as np
import torch

from gloo import run_fn_on_gloo

ROOT = os.path.join(os.path.dirname(__file__), "..")


def load_recipe(relpath: str):
    """The recipe module at examples/`relpath` (its folder on sys.path, as the CLI puts it)."""
    path = os.path.abspath(os.path.join(ROOT, "examples", relpath))
    if os.path.dirname(path) not in sys.path:
        sys.path.insert(0, os.path.dirname(path))
    name = "recipe_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _numpy(t) -> np.ndarray:
    from torch.distributed.tensor import DTensor
    if isinstance(t, DTensor):
        t = t.full_tensor()  # a collective: every rank calls it, in the same order
    return t.detach().double().numpy()


def _forward_inputs(program, inputs: dict) -> dict:
    params = inspect.signature(program.forward if isinstance(program, torch.nn.Module) else program).parameters
    return {k: v for k, v in inputs.items() if k in params}


def _rank_inputs(case, rank: int, world: int) -> dict:
    return case.dist_inputs(rank, world, case.inputs) if case.dist_inputs else dict(case.inputs)


def gloo_train_grads(relpath: str, world: int, **config) -> list[dict]:
    """Each rank's gradients ({param: array}; a DTensor gradient made whole) from the recipe's
    ``train_step``, run on a real gloo group; ``config``: keyword arguments of ``case``."""
    module = load_recipe(relpath)

    def step(rank, world):
        case = module.case(world, **config)
        out = case.distributed(rank, world).train_step(_rank_inputs(case, rank, world), {}, case.train)
        return {n: _numpy(g) for n, g in out["grads"].items()}
    return run_fn_on_gloo(step, world)


def single_grads(case) -> dict:
    """The single-device gradients of the case's training loss (whole batch)."""
    model, loss = case.single, case.train.loss
    out = model(**_forward_inputs(model, case.inputs))
    value = out if loss == "out" else loss(out, case.inputs)
    params = dict(model.named_parameters())
    return {n: g.detach().double().numpy() for n, g in zip(params, torch.autograd.grad(value, list(params.values())))}


def holds_its_part(got: np.ndarray, want: np.ndarray, rank: int, world: int, atol: float = 1e-6) -> bool:
    """Whether a rank's tensor is the single-device one, or its `rank`-th chunk along some dim
    (torch.chunk's split, as the shard layouts cut)."""
    if got.shape == want.shape:
        return np.allclose(got, want, atol=atol)
    for d in range(want.ndim):
        part = torch.from_numpy(want).chunk(world, d)
        if rank < len(part) and part[rank].shape == got.shape and np.allclose(got, part[rank].numpy(), atol=atol):
            return True
    return False


def gloo_training_agrees(relpath: str, world: int, **config) -> bool:
    """Whether every rank's gradients on gloo are its part of the single-device gradients."""
    ranks = gloo_train_grads(relpath, world, **config)
    want = single_grads(load_recipe(relpath).case(world, **config))
    return all(holds_its_part(g[n], want[n], r, world) for r, g in enumerate(ranks) for n in want)


def gloo_forward(relpath: str, world: int, **config) -> list:
    """Each rank's forward output (an array) of the recipe's distributed program on gloo."""
    module = load_recipe(relpath)

    def forward(rank, world):
        case = module.case(world, **config)
        with torch.no_grad():
            return _numpy(case.distributed(rank, world)(**_rank_inputs(case, rank, world)))
    return run_fn_on_gloo(forward, world)


def gloo_forward_agrees(relpath: str, world: int, **config) -> bool:
    """Whether every rank's forward output on gloo is its part of the single-device output."""
    ranks = gloo_forward(relpath, world, **config)
    case = load_recipe(relpath).case(world, **config)
    with torch.no_grad():
        want = case.single(**case.inputs).double().numpy()
    return all(holds_its_part(got, want, r, world) for r, got in enumerate(ranks))
