"""Run a live PyTorch case for real: the single-device program in this process, the
distributed program on a local gloo process group (one forked process per rank, CPU).

This is the execution half of the confirmation of a proof (the comparison is
:mod:`shardproof.engine.confirm`, torch-free): the programs run as the user wrote them,
with torch's kernels and gloo's collectives, independent of shardproof's rules and
numerics. Each value set is the case's own (seed None) or a fresh draw
(:mod:`shardproof.frontends.torch_draws`): the single-device weights are redrawn in place
and the rank programs rebuilt from them by the case's own ``distributed(rank, world)``.
"""
from __future__ import annotations

import datetime
import os
import tempfile
import time
import traceback
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ..case import Case
from . import torch_capture as tc
from .torch_collectives import _reduce_name
from . import torch_train as tt
from .torch_draws import draw_inputs, redraw, restore, snapshot


class RunError(Exception):
    """The programs could not be run here (a runtime error, a timeout)."""


def numpy_values(values: dict) -> dict[str, np.ndarray]:
    """Tensors by name as numpy (floating point as float64); non-tensors are dropped."""
    out = {}
    for k, v in values.items():
        if isinstance(v, torch.Tensor):
            v = tc.local_tensor(v).detach().cpu()
            out[k] = (v.double() if v.is_floating_point() else v).numpy().copy()
    return out


def _values(case: Case, seed: int | None) -> dict:
    """The case's data inputs for value set `seed` (None: its own); redraws the
    single-device weights in place for a draw (the caller restores them)."""
    if seed is None:
        return dict(case.inputs)
    redraw(case.single, seed, buffers=False)  # weights; buffers (rope tables, masks) are often rebuilt per rank
    return draw_inputs(case.inputs, seed)


def _forward(program: Any, data: dict) -> tuple[dict, dict]:
    """(inputs, outputs) of one forward call, as the capture names them."""
    inputs = tc.program_inputs(program, data)
    outputs = tc._flatten_outputs(program(**data))  # as traced: grad mode as the caller has it
    return numpy_values(inputs), numpy_values(outputs)


def _step(program: Any, data: dict, train, step) -> tuple[dict, dict]:
    """(inputs, outputs) of one training step, as :mod:`torch_train` names them: the
    optimizer state is made from the parameters as the capture makes it."""
    inputs = tt.step_inputs(program, data, train)
    fsdp = tt.fsdp_params(program)
    specs = {n: s for n, s in tc.dtensor_specs(program).items() if n not in fsdp}
    params = [n for n, _ in program.named_parameters()]
    names = train.optimizer.state_names if train.optimizer else ()
    state = {p: {s: tc.as_dtensor(inputs[f"{s}{tt.STATE_SEP}{p}"], specs[p]) if p in specs
                 else inputs[f"{s}{tt.STATE_SEP}{p}"] for s in names} for p in params}
    batch = {n: inputs[n] for n in data}
    outputs = tt._flatten(step(program, batch, state, train), params)
    return numpy_values(inputs), numpy_values(outputs)


def run_single(case: Case, seed: int | None) -> tuple[dict, dict]:
    """(inputs, outputs) of the single-device program on value set `seed`."""
    saved = snapshot(case.single)
    try:
        data = _values(case, seed)
        if case.train is not None:
            return _step(case.single, data, case.train, tt.reference_step)
        return _forward(case.single, data)
    finally:
        restore(case.single, saved)


def related_data(relations: dict):
    """``(rank, world, data) -> the rank's data``, each input named in `relations` cut from
    the single-device value as its relation says (a layout: the elements the rank holds;
    ``Partial`` sum or avg: seeded random shares that add up): for a case whose ranks all
    receive the same data under a relation it states, so the value sets satisfy it."""
    def cut(rank: int, world: int, data: dict) -> dict:
        out = dict(data)
        for name, rel in relations.items():
            t = data.get(name)
            if not isinstance(t, torch.Tensor) or not t.ndim:
                continue
            vecs = rel.layout(tuple(t.shape), rank, world)
            if vecs is not None:
                index = np.ix_(*[np.arange(n) if v is None else np.asarray(v) for n, v in zip(t.shape, vecs)])
                out[name] = t[tuple(torch.as_tensor(i) for i in index)]
            elif getattr(rel, "op", None) in ("sum", "avg") and t.is_floating_point():
                g = torch.Generator().manual_seed(7919)  # the same shares in every rank's process
                shares = [torch.randn(t.shape, generator=g, dtype=torch.float64).to(t.dtype) for _ in range(world - 1)]
                whole = t * world if rel.op == "avg" else t
                out[name] = shares[rank] if rank < world - 1 else whole - sum(shares)
        return out
    return cut


def run_rank(case: Case, rank: int, world: int, seed: int | None, rank_data=None) -> tuple[dict, dict]:
    """(inputs, outputs) of rank `rank`'s program on value set `seed` (in a process group);
    `rank_data` (rank, world, data) -> the rank's data, in place of the case's ``dist_inputs``."""
    saved = snapshot(case.single)
    try:
        data = _values(case, seed)
        loader = rank_data or case.dist_inputs
        if loader:
            data = loader(rank, world, data)
        program = case.distributed(rank, world)
        if case.train is not None:
            return _step(program, data, case.train, lambda m, *a: m.train_step(*a))
        return _forward(program, data)
    finally:
        restore(case.single, saved)


_PREMUL_INPUT = {"all_reduce": "tensor", "reduce_scatter_tensor": "input", "reduce_scatter_single": "input"}


def _gloo_premul_sum() -> None:
    """Gloo has no ``ReduceOp.PREMUL_SUM`` (FSDP2's gradient divide factor): in a rank
    process, a collective given it multiplies its input by the factor and sums, which is
    what the op is defined to do."""
    import inspect
    for name, source in _PREMUL_INPUT.items():
        fn = getattr(dist, name, None)
        if fn is None:
            continue

        def premul(*args, _fn=fn, _source=source, _sig=inspect.signature(fn), **kwargs):
            bound = _sig.bind(*args, **kwargs)
            op = bound.arguments.get("op")
            if op is None or _reduce_name(op) != "premul_sum":
                return _fn(*args, **kwargs)
            bound.arguments["op"] = dist.ReduceOp.SUM
            if _source == "tensor":  # in place
                bound.arguments["tensor"].mul_(op.factor)
            else:
                bound.arguments[_source] = bound.arguments[_source] * op.factor
            return _fn(*bound.args, **bound.kwargs)
        setattr(dist, name, premul)


_INTO_BUFFER = ("all_gather_into_tensor", "all_gather_single", "all_gather", "reduce_scatter_tensor",
                "reduce_scatter_single", "all_to_all_single")


def _gloo_no_grad() -> None:
    """Collectives into a fresh buffer record no autograd (c10d's are not differentiable),
    but gloo cuts the buffer into views and copies into them, which grad mode refuses for
    an input that requires grad (a parameter update all-gathered, as ZeRO does). Run them
    without grad mode: the values are the same."""
    for name in _INTO_BUFFER:
        fn = getattr(dist, name, None)
        if fn is None:
            continue

        def no_grad(*args, _fn=fn, **kwargs):
            with torch.no_grad():
                return _fn(*args, **kwargs)
        setattr(dist, name, no_grad)


def _rank_main(case: Case, rank: int, world: int, seeds: list, store_path: str, timeout: float, conn,
               rank_data=None) -> None:
    """A forked rank: join the gloo group, run every value set, send the results back."""
    code = 0
    try:
        torch.set_num_threads(1)
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        _gloo_premul_sum()
        _gloo_no_grad()
        if dist.is_initialized():  # the parent's group (a capture's fake one), inherited: not this one's
            dist.destroy_process_group()
        store = dist.FileStore(store_path, world)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout))
        results = []
        for seed in seeds:
            tc._clear_dtensor_caches()
            results.append(run_rank(case, rank, world, seed, rank_data))
        conn.send(("ok", results))
        dist.destroy_process_group()
    except BaseException as exc:  # noqa: BLE001  (reported to the parent, which decides)
        code = 1
        try:
            conn.send(("error", f"rank {rank}: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-6)}"))
        except Exception:  # noqa: BLE001
            pass
    finally:
        conn.close()
        os._exit(code)  # skip the parent's atexit handlers (pytest, loggers)


def run_distributed(case: Case, world: int, seeds: list, timeout: float = 120.0,
                    rank_data=None) -> list[list[tuple[dict, dict]]]:
    """For each rank, (inputs, outputs) per value set, from one gloo group of `world`
    forked processes. Raises :class:`RunError` when the ranks fail or time out; a group
    whose connection fails (a loaded machine) is tried again, up to twice."""
    for attempt in range(2):
        try:
            return _run_group(case, world, seeds, timeout, rank_data)
        except RunError as exc:
            if "connectFullMesh" not in str(exc) and "Connection closed by peer" not in str(exc):
                raise
        time.sleep(0.5 * (attempt + 1))
    return _run_group(case, world, seeds, timeout, rank_data)


def _run_group(case: Case, world: int, seeds: list, timeout: float, rank_data) -> list[list[tuple[dict, dict]]]:
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="shardproof-gloo-") as tmp:
        procs, conns = [], []
        for rank in range(world):
            parent, child = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_rank_main, args=(case, rank, world, seeds, os.path.join(tmp, "store"),
                                                     timeout, child, rank_data), daemon=True)
            p.start()
            child.close()
            procs.append(p)
            conns.append(parent)
        deadline = time.monotonic() + timeout
        results, errors = [None] * world, []
        try:
            for rank, conn in enumerate(conns):
                left = deadline - time.monotonic()
                if left <= 0 or not conn.poll(left):
                    if not errors:
                        errors.append(f"rank {rank} did not finish within {timeout:.0f} s")
                    break
                try:
                    status, payload = conn.recv()
                except EOFError:
                    errors.append(f"rank {rank} exited without a result (exit code {procs[rank].exitcode})")
                    break
                if status != "ok":
                    errors.append(payload)
                    deadline = min(deadline, time.monotonic() + 2)  # the others' errors, if they come at once
                    continue
                results[rank] = payload
        finally:
            for p in procs:
                p.join(timeout=5)
                if p.is_alive():
                    p.kill()  # our own child, by its handle
                    p.join()
    if errors:  # a rank's own error first: the others' are often only the broken connection to it
        errors.sort(key=lambda e: "Connection closed by peer" in e or "connectFullMesh" in e)
        raise RunError("running the distributed program on a gloo group failed: " + errors[0].strip())
    return results


def run_case(case: Case, world: int, seeds: list, timeout: float = 120.0, rank_data=None) -> list[tuple]:
    """Run both programs on every value set in `seeds` (None: the case's own values): per
    value set (label, single-device inputs, its outputs, per-rank inputs, per-rank outputs);
    `rank_data`: see :func:`run_rank`."""
    try:
        singles = [run_single(case, seed) for seed in seeds]
    except Exception as exc:
        raise RunError(f"running the single-device program failed: {type(exc).__name__}: {exc}") from None
    ranks = run_distributed(case, world, seeds, timeout, rank_data)
    return [("the case's own values" if seed is None else f"draw {seed}", s_in, s_out,
                      [ranks[r][i][0] for r in range(world)], [ranks[r][i][1] for r in range(world)])
            for i, (seed, (s_in, s_out)) in enumerate(zip(seeds, singles))]
