"""Capture of the Llama training step at real Llama-3-8B block shapes (VERDICT's artifact
plan: 2 layers, hidden 4096, 32 heads, 8 KV heads, ffn 14336, dp2 tp2 M2) on fake tensors:
the models, the batch and every traced value are ``FakeTensor``s (shapes, no memory for
values). Measures capture only -- relating the inputs (value matching) and the proof need
the weights' values, which fake tensors do not hold (see bench/README.md).

    python bench/llama_fake.py [--small]
"""
import argparse
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

import llama_stack  # noqa: E402
from shardproof.frontends import torch_train as tt  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true", help="the toy shapes (a check of the script)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    shapes = None if args.small else llama_stack.LLAMA3_8B
    dp, tp, layers, micro = 2, 2, 2, 2
    mode = FakeTensorMode()
    with mode:
        case = llama_stack.case(layers, dp, tp, micro, shapes=shapes)

    def make(rank, world):
        with mode:
            return case.distributed(rank, world)
    t0, c0 = time.perf_counter(), time.process_time()
    seq, _ = tt.capture_single_step(case.single, case.inputs, case.train)
    nodes, rows = len(seq.nodes), [("single-device", len(seq.nodes), time.perf_counter() - t0)]
    for rank in range(dp * tp):
        t = time.perf_counter()
        graph, _ = tt.capture_rank_step(make, rank, dp * tp, case.dist_inputs(rank, dp * tp, case.inputs), case.train)
        nodes += len(graph.nodes)
        rows.append((f"rank {rank}", len(graph.nodes), time.perf_counter() - t))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    params = sum(p.numel() for p in case.single.parameters())
    for label, n, s in rows:
        print(f"  {label}: {n} nodes, {s:.2f} s")
    print(f"Llama {'toy' if args.small else 'Llama-3-8B block'} shapes, {layers} layers ({params / 1e6:.0f} M parameters), "
          f"dp{dp} tp{tp} M{micro}: capture {wall:.2f} s wall, {cpu:.2f} s CPU, {nodes} traced nodes, "
          f"{1000 * cpu / nodes:.3f} CPU ms per node, peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MB")


if __name__ == "__main__":
    main()
