"""Run an adversarial pair for real: the single-device program in this process, the
distributed one on a gloo process group (one forked process per rank, CPU), each draw
building the case afresh from its seed; the outputs are compared under the case's
``expect`` relations. The outcome is a fact about PyTorch, independent of shardproof.

Each draw redraws a single-device module's parameters (see :func:`build`).
Relations understood: ``Replicate()`` (every rank holds the whole output), ``Shard(d)``
(the ranks' outputs concatenated along d), ``Partial("sum")`` (their sum) and
``Slices(d, {rank: (start, stop)})`` (each listed rank holds that range along d).

    python tests/adversarial/gloo_run.py tests/adversarial/pairs/*.py
"""
from __future__ import annotations

import ast
import importlib.util
import multiprocessing
import os
import re
import sys
import tempfile

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
PAIRS = os.path.join(HERE, "pairs")
SEEDS = (1, 2)
RTOL, ATOL = 1e-4, 1e-4


def pair_files() -> list[str]:
    return sorted(os.path.join(PAIRS, f) for f in os.listdir(PAIRS) if f.endswith(".py") and f != "__init__.py")


def load(path: str):
    """The case module at `path` (its folder's helpers importable)."""
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    name = "adv_" + os.path.splitext(os.path.basename(path))[0]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def build(module, world: int, seed: int):
    """The case drawn from `seed`; a module's float parameters are redrawn (distinct random
    values, so a loader that reads the wrong block cannot hide behind zeros or ones) before
    any rank's program is built from them."""
    torch.manual_seed(seed)
    case = module.case(world)
    if isinstance(case.single, torch.nn.Module):
        with torch.no_grad():
            for p in case.single.parameters():
                if p.is_floating_point():
                    p.copy_(torch.randn_like(p))
    return case


def flat_outputs(out) -> dict:
    """Outputs by name, as shardproof names them (``out``, ``out0``..., or the dict's keys)."""
    if isinstance(out, dict):
        return {str(k): v for k, v in out.items()}
    if isinstance(out, (tuple, list)):
        return {f"out{i}": v for i, v in enumerate(out)}
    return {"out": out}


def call(program, data: dict) -> dict:
    with torch.no_grad():
        return {k: v.detach().clone() for k, v in flat_outputs(program(**data)).items()}


def _rank_main(module, world: int, rank: int, store: str, folder: str) -> None:
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
        results = {}
        for seed in SEEDS:
            case = build(module, world, seed)
            data = case.dist_inputs(rank, world, case.inputs) if case.dist_inputs else case.inputs
            results[seed] = call(case.distributed(rank, world), data)
        dist.barrier()
        dist.destroy_process_group()
        torch.save(results, os.path.join(folder, f"rank{rank}.pt"))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent as the outcome
        with open(os.path.join(folder, f"rank{rank}.err"), "w") as f:
            f.write(f"{type(exc).__name__}: {exc}")
        os._exit(1)
    os._exit(0)


def run_ranks(module, world: int, timeout: float = 120.0) -> dict:
    """{seed: [each rank's outputs]}, or raises RuntimeError with the ranks' errors."""
    ctx = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory() as folder:
        store = os.path.join(folder, "store")
        procs = [ctx.Process(target=_rank_main, args=(module, world, r, store, folder)) for r in range(world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        errors = [open(os.path.join(folder, f)).read() for f in sorted(os.listdir(folder)) if f.endswith(".err")]
        missing = [r for r in range(world) if not os.path.exists(os.path.join(folder, f"rank{r}.pt"))]
        if errors or missing:
            raise RuntimeError("; ".join(errors) or f"ranks {missing} did not finish")
        per_rank = [torch.load(os.path.join(folder, f"rank{r}.pt")) for r in range(world)]
    return {seed: [per_rank[r][seed] for r in range(world)] for seed in SEEDS}


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape:
        return False
    if a.is_floating_point() or b.is_floating_point():
        return bool(torch.allclose(a.double(), b.double(), rtol=RTOL, atol=ATOL, equal_nan=True))
    return bool(torch.equal(a, b))


def holds(relation: str, full: torch.Tensor, ranks: list) -> bool:
    """Whether the ranks' tensors `ranks` relate to `full` as `relation` states."""
    s = relation.replace(" ", "")
    if s == "Replicate()":
        return all(_close(t, full) for t in ranks)
    m = re.fullmatch(r"Shard\((-?\d+)\)", s)
    if m:
        try:
            return _close(torch.cat(ranks, int(m.group(1))), full)
        except RuntimeError:
            return False
    if s in ('Partial("sum")', "Partial('sum')", "Partial()"):
        return _close(torch.stack(ranks).sum(0), full)
    m = re.fullmatch(r"Slices\((-?\d+),(\{.*\})\)", s)
    if m:
        dim, table = int(m.group(1)), ast.literal_eval(m.group(2))
        return all(_close(ranks[r], full.narrow(dim, a, b - a)) for r, (a, b) in table.items())
    raise ValueError(f"relation {relation!r} is not one the gloo runner reads")


def gloo_outcome(module, world: int | None = None) -> tuple[str, str]:
    """("equal", detail) when every draw's outputs relate as expected, else ("differs", why)
    -- a rank that fails (an exception, a hang) counts as differing."""
    world = world or getattr(module, "WORLD", 2)
    try:
        dist_out = run_ranks(module, world)
    except RuntimeError as exc:
        return "differs", f"ranks failed: {exc}"
    for seed in SEEDS:
        case = build(module, world, seed)
        single = call(case.single, case.inputs)
        for name, relation in case.expect.items():
            if not holds(relation, single[name], [o[name] for o in dist_out[seed]]):
                return "differs", f"output {name!r} is not {relation} (seed {seed})"
    return "equal", f"{len(SEEDS)} draws agree"


if __name__ == "__main__":
    for path in sys.argv[1:] or pair_files():
        mod = load(path)
        outcome, why = gloo_outcome(mod)
        label = getattr(mod, "LABEL", "ok")  # a zoo case: correct
        flag = "" if (outcome == "differs") == (label == "bug") else "  <-- LABEL MISMATCH"
        print(f"{os.path.basename(path):40s} {label:4s} {outcome:8s} {why}{flag}", flush=True)
