"""Run a program on a real gloo process group (one process per rank, CPU), so that test
labels are facts about PyTorch. Named functions only; no state shared between calls."""
from __future__ import annotations

import importlib
import os
import socket
import tempfile

import numpy as np


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gloo_rank(rank: int, world: int, port: int, module: str, name: str, folder: str) -> None:
    import torch
    import torch.distributed as dist
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
    import torch.multiprocessing as mp
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
