"""Recipe: graph dumps as a user makes them, then verified from the text alone.

    python examples/dumps/make_dumps.py /tmp/mlp_dumps            # writes tp1/, tp2/, tp2.bug/
    shardproof verify --seq /tmp/mlp_dumps/tp1 --dist /tmp/mlp_dumps/tp2 --auto-relations       # verified
    shardproof verify --seq /tmp/mlp_dumps/tp1 --dist /tmp/mlp_dumps/tp2.bug --auto-relations   # violation

    python examples/dumps/make_dumps.py /tmp/mlp_logs --torch-logs    # logs/, tp1/, tp2/ from TORCH_LOGS
    shardproof verify --seq /tmp/mlp_logs/tp1 --dist /tmp/mlp_logs/tp2 --auto-relations         # verified

The single-device MLP and its tensor-parallel version (column-parallel fc1, row-parallel fc2,
all_reduce written with ``torch.distributed._functional_collectives``, so the collective is a
graph op) are traced with ``make_fx`` and written with ``GraphModule.print_readable()``: one
file for the single device, one per rank (``fw.g0.r<rank>.py``), each rank in its own process
of a real gloo group (as under torchrun). ``tp2.bug`` forgets the all_reduce. Placeholders
are named after the function's arguments in both programs, so ``--auto-relations`` relates
them by name and shape (a weight whose dim 0 is halved: Shard(0)).

``--torch-logs``: the programs run under ``torch.compile(backend="aot_eager")`` with
``TORCH_LOGS=aot_graphs``, the single device and each rank in its own process started as
torchrun starts them (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT``), each one's
stderr kept in ``logs/``; ``torch_logs.py`` (beside this file) cuts the graphs out of the logs.
"""
import os
import socket
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

HIDDEN, FFN, TOKENS, WORLD = 8, 16, 4, 2


def mlp(x, w1, b1, w2, b2):  # the single-device program
    return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)


def tp_mlp(x, w1, b1, w2, b2):  # one rank: w1, b1 its rows, w2 its columns, b2 whole
    partial = F.linear(F.gelu(F.linear(x, w1, b1)), w2)
    return funcol.all_reduce(partial, "sum", dist.group.WORLD) + b2


def tp_mlp_bug(x, w1, b1, w2, b2):
    return F.linear(F.gelu(F.linear(x, w1, b1)), w2) + b2  # BUG: the partial sum is never all-reduced


def weights():
    torch.manual_seed(0)
    return dict(x=torch.randn(TOKENS, HIDDEN), w1=torch.randn(FFN, HIDDEN), b1=torch.randn(FFN),
                w2=torch.randn(HIDDEN, FFN), b2=torch.randn(HIDDEN))


def shard(full: dict, rank: int, world: int) -> dict:
    return dict(full, w1=full["w1"].chunk(world, 0)[rank], b1=full["b1"].chunk(world, 0)[rank],
                w2=full["w2"].chunk(world, 1)[rank])


def dump(fn, inputs: dict, path: str) -> None:
    graph = make_fx(fn)(*inputs.values())
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(graph.print_readable(print_output=False))


def _rank(rank: int, out: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        inputs = shard(weights(), rank, WORLD)
        dump(tp_mlp, inputs, os.path.join(out, "tp2", f"fw.g0.r{rank}.py"))
        dump(tp_mlp_bug, inputs, os.path.join(out, "tp2.bug", f"fw.g0.r{rank}.py"))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:  # a free port for the ranks' rendezvous
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(out: str) -> None:
    dump(mlp, weights(), os.path.join(out, "tp1", "fw.g0.r0.py"))
    mp.spawn(_rank, args=(out, _free_port()), nprocs=WORLD, join=True)


def _compile_worker(which: str) -> None:
    """One process of the TORCH_LOGS route: the single device, or a rank (env:// rendezvous)."""
    if which == "single":
        torch.compile(mlp, backend="aot_eager", fullgraph=True)(*weights().values())
        return
    dist.init_process_group("gloo")
    try:
        inputs = shard(weights(), dist.get_rank(), dist.get_world_size())
        torch.compile(tp_mlp, backend="aot_eager", fullgraph=True)(*inputs.values())
    finally:
        dist.destroy_process_group()


def main_torch_logs(out: str) -> None:
    from torch_logs import write_dumps
    logs = os.path.join(out, "logs")
    os.makedirs(logs, exist_ok=True)
    env = dict(os.environ, TORCH_LOGS="aot_graphs", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
               WORLD_SIZE=str(WORLD))
    jobs = [("single", dict(env))] + [(f"rank{r}", dict(env, RANK=str(r))) for r in range(WORLD)]
    procs = []
    for name, job_env in jobs:
        with open(os.path.join(logs, f"{name}.log"), "w") as err:
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", name],
                                          env=job_env, stderr=err))
    if any(p.wait(timeout=300) for p in procs):
        raise RuntimeError(f"a process failed: see {logs}")
    for name, _ in jobs:
        with open(os.path.join(logs, f"{name}.log")) as f:
            text = f.read()
        if name == "single":
            write_dumps(text, os.path.join(out, "tp1"), 0)
        else:
            write_dumps(text, os.path.join(out, "tp2"), int(name[4:]))


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--worker"]:
        _compile_worker(args[1])
    elif "--torch-logs" in args:
        main_torch_logs(([a for a in args if a != "--torch-logs"] or ["mlp_logs"])[0])
    else:
        main(args[0] if args else "mlp_dumps")
