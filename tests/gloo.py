"""Run a case's distributed program for real: one gloo process per rank (CPU), and its
single-device program, then compare. Labels of test programs are facts about PyTorch.

``run_case_file(path, world_size)`` -> :class:`GlooRun` (each rank's outputs and the
single-device ones); ``max_differences(run)`` -> {output: max |rank - single| over ranks}.
A case file defines ``case(world_size)``; its outputs must be replicated on every rank
(each rank returns the single-device value when the program is correct)."""
from __future__ import annotations

import contextlib
import datetime
import functools
import multiprocessing
import importlib
import importlib.util
import os
import queue as queues
import socket
import sys
import tempfile
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

_ZOO = os.path.join(os.path.dirname(__file__), "..", "src", "shardproof", "zoo")


@dataclass
class GlooRun:
    single: dict
    ranks: list  # per rank: {output: tensor} or the error text
    expect: dict | None = None  # the case's expected relations ("Shard(0)": rank r holds chunk r)


def load_case(path: str, world_size: int):
    for d in (_ZOO, os.path.join(_ZOO, "train"), os.path.dirname(os.path.abspath(path))):
        if d not in sys.path:
            sys.path.insert(0, d)
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.case(world_size)


def _outputs(out) -> dict:
    if isinstance(out, dict):
        return {str(k): v for k, v in out.items()}
    if isinstance(out, (tuple, list)):
        return {f"out{i}": v for i, v in enumerate(out)}
    return {"out": out}


def _call(program, data: dict) -> dict:
    with torch.no_grad():
        return {k: v.detach().clone() for k, v in _outputs(program(**data)).items()}


def _by_value(result):
    """Tensors as numpy arrays: a queue passes tensors by shared file descriptor, which is
    gone once the rank's process exits."""
    return {k: v.numpy() for k, v in result.items()} if isinstance(result, dict) else result


def _as_tensors(result):
    return {k: torch.from_numpy(v) for k, v in result.items()} if isinstance(result, dict) else result


def _in_gloo_group(rank: int, world: int, port: int, queue, seconds: float, compute) -> None:
    """Join a gloo group, put ``(rank, compute())`` (or the error's text) on `queue`, leave."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=seconds))
    try:
        result = compute()
    except Exception as exc:  # the program is refused at run time (a real error)
        result = f"{type(exc).__name__}: {exc}"
    queue.put((rank, result))
    with contextlib.suppress(Exception):
        dist.barrier()  # rank 0 hosts the store: keep it until every rank is done
    dist.destroy_process_group()


def _rank_main(rank: int, world: int, port: int, path: str, queue) -> None:
    def compute():
        case = load_case(path, world)
        data = case.dist_inputs(rank, world, case.inputs) if case.dist_inputs else dict(case.inputs)
        return _by_value(_call(case.distributed(rank, world), data))
    _in_gloo_group(rank, world, port, queue, 15, compute)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Tagged:
    """A queue whose puts are tagged with the index of the program they answer for."""

    def __init__(self, queue, index: int):
        self.queue, self.index = queue, index

    def put(self, item) -> None:
        rank, value = item
        self.queue.put(((self.index, rank), value))


def _each_file(main, rank: int, world: int, ports: list, paths: list, queue) -> None:
    """``main(rank, world, port, path, queue)`` of each case file, each in a fresh gloo group of
    its own (its own port): one process start serves every file."""
    for i, (port, path) in enumerate(zip(ports, paths)):
        main(rank, world, port, path, _Tagged(queue, i))


def _spawn_ranks(target, path, world_size: int, timeout: float) -> dict:
    """Run ``target(rank, world, port, path, queue)`` in one spawned process per rank;
    {rank: its result} for the ranks that answered within `timeout` (a hang leaves some out).
    `path` a list of case files: ``port`` is a list too (one fresh port per file) and the
    results are keyed ``(index of the file, rank)``."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    many = isinstance(path, (list, tuple))
    port = [_free_port() for _ in path] if many else _free_port()
    path = [os.path.abspath(p) for p in path] if many else os.path.abspath(path)
    procs = [ctx.Process(target=target, args=(r, world_size, port, path, queue)) for r in range(world_size)]
    for p in procs:
        p.start()
    results = {}
    try:
        for _ in range(world_size * (len(path) if many else 1)):
            key, value = queue.get(timeout=timeout)
            results[key] = _as_tensors(value)
    except queues.Empty:  # a rank hangs (collectives that never pair up)
        pass
    for p in procs:
        p.join(5)
        if p.is_alive():
            p.terminate()
            p.join()
    return results


def _gloo_run(path: str, world_size: int, results: dict) -> GlooRun:
    case = load_case(path, world_size)
    ranks = [results.get(r, "no result (hang)") for r in range(world_size)]
    return GlooRun(_call(case.single, dict(case.inputs)), ranks, case.expect)


def run_case_file(path: str, world_size: int, timeout: float = 120) -> GlooRun:
    return _gloo_run(path, world_size, _spawn_ranks(_rank_main, path, world_size, timeout))


def _spawn_each(main, paths: list, world_size: int, timeout: float) -> list:
    """Per file of `paths`: {rank: ``main(rank, world, port, path, queue)``'s result}, all run by
    one spawn of `world_size` processes, each file in a fresh gloo group of its own; None for a
    file some rank did not answer for (a hang ends the spawn: that file and those after it)."""
    results = _spawn_ranks(functools.partial(_each_file, main), list(paths), world_size, timeout)
    return [{r: results[i, r] for r in range(world_size)} if all((i, r) in results for r in range(world_size))
            else None for i in range(len(paths))]


def run_case_files(paths: list, world_size: int, timeout: float = 120) -> dict:
    """{path: :func:`run_case_file`'s run} of the files whose every rank answered, all run by one
    spawn (:func:`_spawn_each`); the files left out are for the caller to run alone."""
    return {path: _gloo_run(path, world_size, got)
            for path, got in zip(paths, _spawn_each(_rank_main, paths, world_size, timeout)) if got is not None}


def max_differences(run: GlooRun) -> dict:
    """{output: max abs difference of any rank from the single device} (inf: a rank failed
    or its shape differs)."""
    out = {}
    for name, whole in run.single.items():
        worst = 0.0
        sharded = str((run.expect or {}).get(name)) == "Shard(0)"
        for r, got in enumerate(run.ranks):
            ref = whole.chunk(len(run.ranks), 0)[r] if sharded else whole
            value = got.get(name) if isinstance(got, dict) else None
            if value is None or value.shape != ref.shape:
                worst = float("inf")
            else:
                worst = max(worst, float((value.double() - ref.double()).abs().max()))
        out[name] = worst
    return out


def agrees(path: str, world_size: int, tol: float = 1e-6) -> bool:
    """Whether every rank's outputs equal the single device's on a real gloo group."""
    return all(d <= tol for d in max_differences(run_case_file(path, world_size)).values())


def _train_main(rank: int, world: int, port: int, path: str, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    seconds = float(os.environ.get("SHARDPROOF_GLOO_TIMEOUT_S", 15))  # 8-16 ranks on 2 cores need more
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=seconds))
    try:
        from dataclasses import replace
        case = load_case(path, world)
        train = replace(case.train, optimizer=None, grad_clip=None)
        data = case.dist_inputs(rank, world, case.inputs) if case.dist_inputs else dict(case.inputs)
        out = case.distributed(rank, world).train_step(data, {}, train)
        result = _by_value({k: v.detach().clone() for k, v in out["grads"].items()})
    except Exception as exc:
        result = f"{type(exc).__name__}: {exc}"
    queue.put((rank, result))
    with contextlib.suppress(Exception):
        dist.barrier()
    dist.destroy_process_group()


def training_gradients(path: str, world_size: int, timeout: float = 300) -> tuple[dict, list]:
    """A training case's gradients, no clipping nor optimizer: (single-device {param: grad},
    [each gloo rank's {param: grad}]); the loss is the case's ``train.loss``."""
    results = _spawn_ranks(_train_main, path, world_size, timeout)
    return _single_gradients(path, world_size), [results.get(r, "no result (hang)") for r in range(world_size)]


def training_gradients_of(paths: list, world_size: int, timeout: float = 300) -> dict:
    """{path: :func:`training_gradients`} of the files whose every rank answered, all run by one
    spawn (:func:`_spawn_each`); the files left out are for the caller to run alone."""
    return {path: (_single_gradients(path, world_size), [got[r] for r in range(world_size)])
            for path, got in zip(paths, _spawn_each(_train_main, paths, world_size, timeout)) if got is not None}


def gradients_agree(path: str, world_size: int, batch: list = (), cache: dict | None = None,
                    timeout: float = 300) -> list:
    """Per rank: whether its gradients (:func:`training_gradients`) equal the single-device ones
    (False: they differ, or no result). `cache` (a dict the caller keeps) given: the first file
    asked for at a world size runs the files of `batch` of that size in one spawn
    (:func:`training_gradients_of`); a file not in it, or one that spawn left out, runs alone."""
    if cache is not None and world_size not in cache:
        cache[world_size] = training_gradients_of(list(batch), world_size)
    got = (cache or {}).get(world_size, {}).get(path)
    single, ranks = got or training_gradients(path, world_size, timeout)
    return [isinstance(r, dict) and all(torch.allclose(torch.as_tensor(r[n]), single[n].detach(), atol=1e-5)
                                        for n in single) for r in ranks]


def _single_gradients(path: str, world_size: int) -> dict:
    case = load_case(path, world_size)
    single = case.single
    forward_inputs = {k: v for k, v in case.inputs.items() if k == "x"}
    loss = case.train.loss(single(**forward_inputs), case.inputs)
    params = dict(single.named_parameters())
    return dict(zip(params, torch.autograd.grad(loss, list(params.values()))))


def _gloo_rank(rank: int, world: int, port: int, module: str, name: str, folder: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        program = getattr(importlib.import_module(module), name)
        with np.load(os.path.join(folder, f"in{rank}.npz")) as data:
            inputs = {k: torch.from_numpy(data[k]) for k in data.files}
        out = program(rank, world, inputs)
        np.savez(os.path.join(folder, f"out{rank}.npz"), **{k: v.numpy() for k, v in out.items()})
    finally:
        dist.destroy_process_group()


def run_program_on_gloo(module: str, name: str, rank_inputs: list[dict]) -> list[dict]:
    """``module.name(rank, world, inputs)`` (inputs: name -> tensor; returns name -> tensor)
    run by every rank of one gloo group at once; each rank's outputs as numpy arrays."""
    world = len(rank_inputs)
    with tempfile.TemporaryDirectory() as folder:
        for r, inputs in enumerate(rank_inputs):
            np.savez(os.path.join(folder, f"in{r}.npz"), **inputs)
        mp.start_processes(_gloo_rank, args=(world, _free_port(), module, name, folder), nprocs=world,
                           start_method="spawn", join=True)
        outs = []
        for r in range(world):
            with np.load(os.path.join(folder, f"out{r}.npz")) as data:
                outs.append({k: data[k] for k in data.files})
    return outs


def load_case_module(path: str):
    """The case file at `path` as a module."""
    name = "gloo_case_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_case(path: str, world: int, config: dict, seed):
    """``case(world, **config)``; with a `seed`, the single-device weights redrawn (distinct
    values, as shardproof does) before any rank's program is built from them."""
    from shardproof.frontends.torch_draws import redraw
    case = load_case_module(path).case(world, **config)
    if seed is not None:
        redraw(case.single, seed)
    return case


def _rank_worker(rank: int, world: int, path: str, configs: list, seed, port: int, folder: str) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        outs = []
        for config in configs:
            case = build_case(path, world, config, seed)
            program = case.distributed(rank, world)
            data = case.dist_inputs(rank, world, case.inputs) if case.dist_inputs else case.inputs
            with torch.no_grad():
                outs.append(program(**data))
        torch.save(outs, os.path.join(folder, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def run_on_gloo(path: str, configs: list, world: int, seed=1) -> list:
    """For each config (keyword arguments of the case file's ``case``): the single-device
    output and every rank's output, the ranks run on a real gloo group."""
    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(_rank_worker, args=(world, path, configs, seed, _free_port(), folder), nprocs=world, join=True)
        ranks = [torch.load(os.path.join(folder, f"rank{r}.pt")) for r in range(world)]
    out = []
    for i, config in enumerate(configs):
        case = build_case(path, world, config, seed)
        with torch.no_grad():
            single = case.single(**case.inputs)
        out.append((single, [ranks[r][i] for r in range(world)]))
    return out


def outputs_agree(single, rank_outputs, atol: float = 1e-5) -> bool:
    """Whether every rank's output equals the single-device one (a replicated output)."""
    return all(r.shape == single.shape and torch.allclose(r.double(), single.double(), atol=atol)
               for r in rank_outputs)


def _variant_call(program, inputs):
    out = program(**inputs)
    return out.detach().clone() if isinstance(out, torch.Tensor) else out


def _variants_rank_main(rank, world, port, path, builder, modules: dict, out_dir):
    sys.path.insert(0, path)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        outs = {}
        for module, variants in modules.items():
            mod = importlib.import_module(module)
            for v in variants:
                case = getattr(mod, builder)(world, v)
                inputs = case.dist_inputs(rank, world, case.inputs) if case.dist_inputs else case.inputs
                inputs = {k: t.clone() if isinstance(t, torch.Tensor) else t for k, t in inputs.items()}
                outs.setdefault(module, {})[v] = _variant_call(case.distributed(rank, world), inputs)
        torch.save(outs, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def gloo_outputs_of(path: str, modules: dict, builder: str, world: int) -> dict:
    """{module: :func:`gloo_outputs`} of each module of `modules` ({module: its variants}), all
    run by one gloo group of `world` processes."""
    with tempfile.TemporaryDirectory() as out_dir:
        mp.start_processes(_variants_rank_main, args=(world, _free_port(), path, builder,
                                                      {m: list(v) for m, v in modules.items()}, out_dir),
                           nprocs=world, join=True, start_method="spawn")
        ranks = [torch.load(os.path.join(out_dir, f"rank{r}.pt")) for r in range(world)]
    return {m: [r.get(m, {}) for r in ranks] for m in modules}


def gloo_outputs(path: str, module: str, builder: str, variants, world: int) -> list[dict]:
    """Each rank's outputs ``{variant: tensor}`` of ``module.builder(world, variant).distributed``
    run on a real gloo group of `world` processes (`path`: the folder holding `module`)."""
    return gloo_outputs_of(path, {module: variants}, builder, world)[module]


def single_output(case):
    return _variant_call(case.single, dict(case.inputs))


def variant_agrees(case, rank_outs: list, expect: str = "Replicate()", atol: float = 1e-5) -> bool:
    """Whether the ranks' outputs hold the single-device output as `expect` says
    (``Replicate()`` or ``Shard(d)``): same dtype, equal values (nan where nan)."""
    want = single_output(case)
    if expect.startswith("Shard("):
        got = torch.cat(rank_outs, dim=int(expect[6:-1]))
        pieces = [got]
    else:
        pieces = rank_outs
    for got in pieces:
        if got.dtype != want.dtype or got.shape != want.shape:
            return False
        if not torch.allclose(got.double(), want.double(), atol=atol, rtol=1e-5, equal_nan=True):
            return False
    return True


def forget_parent_dtensor_state() -> None:
    """In a forked rank: drop what the parent process left in torch.distributed -- its (fake)
    process group, and DTensor's sharding-plan caches, whose keys compare meshes by shape, not
    process group or rank, so a plan cached by a parent's rank-1 capture would be reused here
    (a vocab-parallel embedding's backward then masks rank 1's rows on every rank)."""
    if dist.is_initialized():
        dist.destroy_process_group()
    torch._C._clear_DTensor_sharding_propagator_cache()
    from torch.distributed.tensor import DTensor
    DTensor._op_dispatcher.sharding_propagator.propagate_op_sharding.cache_clear()


def _fn_rank(fn, rank, world, path, conn, fresh=True):
    try:
        torch.set_num_threads(1)
        if fresh:
            forget_parent_dtensor_state()
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", store=dist.FileStore(path, world), rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=60))
        conn.send(("ok", fn(rank, world)))
        dist.destroy_process_group()
    except BaseException as exc:  # noqa: BLE001
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()
        os._exit(0)


def run_fn_on_gloo(fn, world: int, timeout: float = 120.0, fresh: bool = True) -> list:
    """``[fn(rank, world) for each rank]``, each rank in its own process of one gloo group
    (results must be picklable: return numpy arrays or plain values); forked, each rank
    first forgets the parent's torch.distributed state (`fresh`)."""
    ctx = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory() as tmp:
        pipes = [ctx.Pipe(duplex=False) for _ in range(world)]
        procs = [ctx.Process(target=_fn_rank, args=(fn, r, world, os.path.join(tmp, "store"), pipes[r][1], fresh))
                 for r in range(world)]
        for p in procs:
            p.start()
        out = []
        for r, (recv, _) in enumerate(pipes):
            if not recv.poll(timeout):
                raise TimeoutError(f"rank {r} timed out")
            status, value = recv.recv()
            if status != "ok":
                raise RuntimeError(f"rank {r}: {value}")
            out.append(value)
        for p in procs:
            p.join(10)
    return out


def sharded_differences(path: str, world_size: int, dim: int, env: dict | None = None) -> list[float]:
    """Per rank, max |its ``out`` - chunk r along `dim` of the single device's| on a real gloo
    group, the case file loaded with `env` set (e.g. ``{"BUG": ...}``); inf where a rank failed."""
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        run = run_case_file(path, world_size)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    whole = run.single["out"]
    return [float((r["out"] - whole.chunk(world_size, dim)[i]).abs().max()) if isinstance(r, dict) else float("inf")
            for i, r in enumerate(run.ranks)]


def _timed_rank(rank: int, world: int, port: int, program, kwargs: dict, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    forget_parent_dtensor_state()
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        result = _by_value({k: v.detach() for k, v in program(rank, world, **kwargs).items()})
    except Exception as exc:  # noqa: BLE001
        result = f"{type(exc).__name__}: {exc}"
    queue.put((rank, result))
    dist.destroy_process_group()


def run_with_timeout(program, world: int, timeout: float = 5.0, **kwargs):
    """``program(rank, world, **kwargs)`` (returns name -> tensor) on every rank of one gloo
    group of forked processes; each rank's outputs (numpy), or None when a rank has not
    finished after `timeout` seconds (a hang: the ranks are killed)."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_timed_rank, args=(r, world, port, program, kwargs, queue), daemon=True)
             for r in range(world)]
    for p in procs:
        p.start()
    results = {}
    try:
        for _ in range(world):
            rank, result = queue.get(timeout=timeout)
            results[rank] = result
    except queues.Empty:
        return None
    finally:
        for p in procs:
            p.join(timeout=0.5)
            if p.is_alive():
                p.kill()
    return [results[r] for r in range(world)]


def local_piece(whole, local, index: int):
    """`whole`'s chunk `index` along the one dimension where `local` is smaller (a tensor-parallel
    shard), or `whole` itself when the shapes agree."""
    dims = [d for d in range(whole.dim()) if whole.shape[d] != local.shape[d]]
    if not dims:
        return whole
    return whole.chunk(whole.shape[dims[0]] // local.shape[dims[0]], dims[0])[index]


def tp_gradients_agree(path: str, world_size: int, tp: int, cp: int = 1, timeout: float = 600) -> bool:
    """Whether every gloo rank's gradients equal the single-device ones, each tensor-parallel
    gradient compared with its tp rank's (``rank // cp % tp``) chunk of the whole."""
    single, ranks = training_gradients(path, world_size, timeout)
    if any(not isinstance(r, dict) for r in ranks):
        return False
    return all(torch.allclose(got[n].double(), local_piece(g.detach(), got[n], rank // cp % tp).double(), rtol=1e-5,
                              atol=1e-6) for rank, got in enumerate(ranks) for n, g in single.items())


def train_step_on_rank(module, bug=None):
    """``run(rank, world)`` for :func:`run_fn_on_gloo`: the rank's ``train_step`` of case module
    `module`'s ``make_case(world, bug)``, as (loss, {param: whole gradient as numpy})."""
    def run(rank, world):
        case = module.make_case(world, bug)
        out = case.distributed(rank, world).train_step(dict(case.inputs), {}, case.train)
        whole = lambda t: t.full_tensor() if hasattr(t, "full_tensor") else t  # noqa: E731
        return float(whole(out["loss"])), {n: whole(g).detach().numpy() for n, g in out["grads"].items()}
    return run


def _step_main(rank: int, world: int, port: int, path: str, queue) -> None:
    def compute():
        from shardproof.frontends.torch_train import state_values
        case = load_case(path, world)
        data = case.dist_inputs(rank, world, case.inputs) if case.dist_inputs else dict(case.inputs)
        program = case.distributed(rank, world)
        params = {n: p.detach() for n, p in program.named_parameters()}
        out = program.train_step(data, state_values(params, case.train.optimizer), case.train)
        flat = {f"grad:{n}": g for n, g in out["grads"].items()}
        flat.update({f"updated:{n}": u for n, u in (out.get("updated") or {}).items()})
        return _by_value({k: v.detach().clone() for k, v in flat.items()})
    _in_gloo_group(rank, world, port, queue, 60, compute)


def training_steps_agree(paths: list, world_size: int, tp: int, timeout: float = 300) -> list:
    """:func:`training_step_agrees` of each case file in `paths`, the ranks' steps run by one
    spawn of `world_size` processes (each step in a fresh gloo group of its own)."""
    from shardproof.frontends.torch_train import reference_step, state_values
    each = _spawn_each(_step_main, paths, world_size, timeout) if len(paths) > 1 else [None]
    labels = []
    for path, results in zip(paths, each):
        if results is None:  # one file (or one a hang left out): run alone
            results = _spawn_ranks(_step_main, path, world_size, timeout)
        case = load_case(path, world_size)
        params = {n: p.detach() for n, p in case.single.named_parameters()}
        ref = reference_step(case.single, dict(case.inputs), state_values(params, case.train.optimizer), case.train)
        single = {f"grad:{n}": g for n, g in ref["grads"].items()}
        single.update({f"updated:{n}": u for n, u in ref["updated"].items()})
        ranks = [results.get(r, "no result (hang)") for r in range(world_size)]
        labels.append(all(isinstance(r, dict) and set(r) == set(single) for r in ranks) and all(
            torch.allclose(got[n].double(), local_piece(v.detach(), got[n], rank % tp).double(), rtol=1e-5, atol=1e-6)
            for rank, got in enumerate(ranks) for n, v in single.items()))
    return labels


def training_step_agrees(path: str, world_size: int, tp: int, timeout: float = 300) -> bool:
    """Whether every gloo rank's whole training step (clipping and optimizer included, the
    optimizer state as shardproof draws it) gives the single-device reference step's gradients
    and updated parameters, each tensor-parallel one compared with its tp rank's chunk."""
    return training_steps_agree([path], world_size, tp, timeout)[0]
