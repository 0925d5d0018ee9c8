"""Run a case's distributed program for real on a local gloo process group (one process per
rank, CPU) and compare it with the single-device program: the label of a test program is a
fact about PyTorch, not about shardproof's rules."""
import importlib
import os
import socket
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _call(program, inputs):
    out = program(**inputs)
    return out.detach().clone() if isinstance(out, torch.Tensor) else out


def _rank_main(rank, world, port, path, module, builder, variants, out_dir):
    sys.path.insert(0, path)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        mod = importlib.import_module(module)
        outs = {}
        for v in variants:
            case = getattr(mod, builder)(world, v)
            inputs = case.dist_inputs(rank, world, case.inputs) if case.dist_inputs else case.inputs
            inputs = {k: t.clone() if isinstance(t, torch.Tensor) else t for k, t in inputs.items()}
            outs[v] = _call(case.distributed(rank, world), inputs)
        torch.save(outs, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def gloo_outputs(path: str, module: str, builder: str, variants, world: int) -> list[dict]:
    """Each rank's outputs ``{variant: tensor}`` of ``module.builder(world, variant).distributed``
    run on a real gloo group of `world` processes (`path`: the folder holding `module`)."""
    with tempfile.TemporaryDirectory() as out_dir:
        mp.start_processes(_rank_main, args=(world, _free_port(), path, module, builder, list(variants), out_dir),
                           nprocs=world, join=True, start_method="spawn")
        return [torch.load(os.path.join(out_dir, f"rank{r}.pt")) for r in range(world)]


def single_output(case):
    return _call(case.single, dict(case.inputs))


def agrees(case, rank_outs: list, expect: str = "Replicate()", atol: float = 1e-5) -> bool:
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
