"""Recipe: graph dumps as a user makes them, then verified from the text alone.

    python examples/dumps/make_dumps.py /tmp/mlp_dumps            # writes tp1/, tp2/, tp2.bug/
    shardproof verify --seq /tmp/mlp_dumps/tp1 --dist /tmp/mlp_dumps/tp2 --auto-relations       # verified
    shardproof verify --seq /tmp/mlp_dumps/tp1 --dist /tmp/mlp_dumps/tp2.bug --auto-relations   # violation

The single-device MLP and its tensor-parallel version (column-parallel fc1, row-parallel fc2,
all_reduce written with ``torch.distributed._functional_collectives``, so the collective is a
graph op) are traced with ``make_fx`` and written with ``GraphModule.print_readable()``: one
file for the single device, one per rank (``fw.g0.r<rank>.py``), each rank in its own process
of a real gloo group (as under torchrun). ``tp2.bug`` forgets the all_reduce. Placeholders
are named after the function's arguments in both programs, so ``--auto-relations`` relates
them by name and shape (a weight whose dim 0 is halved: Shard(0)).
"""
import os
import socket
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


def main(out: str) -> None:
    dump(mlp, weights(), os.path.join(out, "tp1", "fw.g0.r0.py"))
    with socket.socket() as s:  # a free port for the ranks' rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_rank, args=(out, port), nprocs=WORLD, join=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "mlp_dumps")
