"""Run a case's programs for real on a local gloo process group (CPU, one process per rank)
and compare with the single-device program: the labels of soundness tests are facts about
PyTorch, not about shardproof's rules."""
import importlib.util
import os
import socket
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def agrees(single, rank_outputs, atol: float = 1e-5) -> bool:
    """Whether every rank's output equals the single-device one (a replicated output)."""
    return all(r.shape == single.shape and torch.allclose(r.double(), single.double(), atol=atol)
               for r in rank_outputs)
