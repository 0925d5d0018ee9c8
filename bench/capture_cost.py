"""Capture cost per traced op (issue 16): the Llama training step of bench/llama_stack.py
captured (single-device step and every rank), after one warm-up capture (imports, caches).
``python bench/capture_cost.py [N dp tp M] [--profile FILE] [--workers K]``; prints
seconds (wall; CPU of this process and its workers), traced nodes and CPU ms per node; with --profile a cProfile dump of the measured capture."""
import argparse
import cProfile
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import llama_stack  # noqa: E402
import torch  # noqa: E402
from shardproof.api import capture_case  # noqa: E402


def _children_cpu() -> float:
    """CPU seconds of the finished worker processes (parallel capture)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measure(n_layers=2, dp=2, tp=2, microbatches=2, profile=None, **options) -> dict:
    case = llama_stack.case(n_layers, dp, tp, microbatches)
    profiler = cProfile.Profile() if profile else None
    t0, c0 = time.perf_counter(), time.process_time() + _children_cpu()
    if profiler:
        profiler.enable()
    seq, dist, *_ = capture_case(case, dp * tp, **options)
    if profiler:
        profiler.disable()
        profiler.dump_stats(profile)
    seconds, cpu = time.perf_counter() - t0, time.process_time() + _children_cpu() - c0
    nodes = len(seq.nodes) + sum(len(g.nodes) for g in dist.graphs)
    return {"seconds": seconds, "cpu_seconds": cpu, "nodes": nodes, "ms_per_node": 1000 * cpu / nodes}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shape", nargs="*", type=int, default=[2, 2, 2, 2], help="N dp tp M")
    ap.add_argument("--profile")
    ap.add_argument("--workers", type=int)
    ap.add_argument("--no-symmetry", action="store_true", help="trace every rank (as before rank classes)")
    args = ap.parse_args()
    if args.no_symmetry:
        from shardproof import api
        api.SYMMETRY = False
    options = {} if args.workers is None else {"workers": args.workers}
    torch.set_num_threads(1)  # tiny kernels: no thread pool spinning in the measurement
    measure(1, 1, 2, 1, **options)  # warm-up
    r = measure(*args.shape, profile=args.profile, **options)
    print(f"N dp tp M = {args.shape}: capture {r['seconds']:.2f} s wall, {r['cpu_seconds']:.2f} s CPU, {r['nodes']} traced nodes, "
          f"{r['ms_per_node']:.3f} ms CPU per node")


if __name__ == "__main__":
    main()
