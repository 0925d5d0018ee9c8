"""The Llama-3-405B-like plan of issue 16 (126 layers, dp64 tp8, 16 microbatches; hidden 16384,
128 heads, 8 KV heads, ffn 53248, vocab 128256), end to end on this machine. What is proved and
what is executed, exactly:

1. **The 126-layer stack at the real sizes** (sequence 8192 by default), forward and backward on
   one tp8 group, **proved** on fake tensors (shapes only, no memory for values) from the plan's
   stated relations (``llama_layers.TP_RELATIONS``: how each rank's parameter is sliced) by
   ``shardproof.blocks_shapes.verify_blocks_at_shapes``: every layer screened at the real sizes
   (its dispatched ops on the single device and the 8 ranks), identical layers proved once, the
   contracts chained. **Confirmed by execution at reduced widths**: the same stack built with the
   same heads (128), KV heads (8), tp (8) and code at head_dim 4 (hidden 512, ffn 64, sequence 4),
   verified with values (the stated relations checked against the values, each distinct block
   proved and run on a gloo group of 8 processes), after checking that the reduced and the real
   stacks are the same program modulo sizes (classes of layers, graph structure, relations proved
   at every node). Verdict ``verified`` says exactly that: "proved at real shapes; confirmed at
   reduced widths".
2. **The training step at dp64 tp8 with 16 microbatches** (the bench model of bench/scale.py at
   its toy widths, one layer: 512 ranks), captured and proved by ``prepare`` + the engine (no
   confirmation by execution: 512 gloo processes): rank classes (symmetry over dp), and whatever
   of issue 16's class proof / microbatch induction / step contracts this tree has (detected,
   printed). Run in its own process with a time limit; its cost is measured, not assumed.

What is not covered: the vocab-sized embedding/head, and the composition of the stack's
contracts with the step's tail at the real sizes (loss, accumulation, dp all_reduce, clipping,
AdamW): part 2 checks that tail at toy widths only.

    python bench/llama405b.py [--layers 126] [--seq 8192] [--step-timeout 900] [--no-step]
"""
import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src", "shardproof", "zoo", "train"))

import torch  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

import llama_layers as L  # noqa: E402
from shardproof.blocks_shapes import verify_blocks_at_shapes  # noqa: E402

LAYERS, DP, TP, MICRO, VOCAB = 126, 64, 8, 16, 128256
REAL = dict(hidden=16384, heads=128, kv_heads=8, ffn=53248)
REDUCED = dict(hidden=512, heads=128, kv_heads=8, ffn=64)  # head_dim 4: the same heads, KV heads and tp
ROWS, REDUCED_SEQ = 1, 4
ROPE_POSITIONS = 131072  # Llama-3.1's RoPE table; a training sequence reads its first `seq` rows
FEATURES = {"rank classes (symmetry over dp)": "shardproof.frontends.rank_classes",
            "a proof per rank class": "shardproof.engine.classes",
            "microbatch loops derived (traced once per distinct program)": "shardproof.frontends.microbatches",
            "step contracts (blocks + the step's tail)": "shardproof.step_blocks"}


def stack(n_layers: int, seq: int):
    """Part 1: the stack proved at the real sizes, confirmed at reduced widths."""
    mode = FakeTensorMode()
    with L.rope_length(max(seq, ROPE_POSITIONS)):  # every block's table, the ranks' (built later) too
        with mode:
            real = L.full_layers(n_layers, **REAL)
            real_data = (torch.randn(ROWS, seq, REAL["hidden"]), torch.randn(ROWS, seq, REAL["hidden"]))
        torch.manual_seed(0)
        reduced = L.full_layers(n_layers, **REDUCED)
        reduced_data = (torch.randn(ROWS, REDUCED_SEQ, REDUCED["hidden"]),
                        torch.randn(ROWS, REDUCED_SEQ, REDUCED["hidden"]))
        sizes = (f"hidden {REAL['hidden']}, ffn {REAL['ffn']}, sequence {seq}",
                 f"hidden {REDUCED['hidden']}, ffn {REDUCED['ffn']}, sequence {REDUCED_SEQ}")
        return verify_blocks_at_shapes(real, reduced, L.parallel_layer(), real_data, reduced_data, TP, L.TP_RELATIONS,
                                       "llama405b-like stack", mode, confirm_draws=0, sizes=sizes)


def features() -> dict:
    return {what: importlib.util.find_spec(module) is not None for what, module in FEATURES.items()}


def step(timeout: int):
    """Part 2 in its own process (bench/scale.py's row: capture + proof, peak memory)."""
    cmd = [sys.executable, os.path.join(HERE, "scale.py"), "--one", f"1,{DP},{TP},{MICRO}"]
    t0 = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"not finished in {timeout} s"}
    if out.returncode:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1][:200], "wall_s": time.perf_counter() - t0}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=LAYERS)
    ap.add_argument("--seq", type=int, default=8192, help="sequence length at the real sizes")
    ap.add_argument("--no-step", action="store_true", help="skip part 2 (the dp64 tp8 M16 step)")
    ap.add_argument("--step-timeout", type=int, default=900)
    args = ap.parse_args()
    torch.set_num_threads(1)
    t0, c0 = time.perf_counter(), time.process_time()
    report = stack(args.layers, args.seq)
    t1 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # the largest gloo rank process
    shapes = report.blocks["shapes"]
    print(f"1. {args.layers}-layer stack, tp{TP}: {report.blocks['summary']}; verdict {report.status}"
          f"{' (' + report.reason + ')' if report.reason else ''}")
    print(f"   {shapes['statement']}")
    print(f"   real sizes: {shapes['real_seconds']:.1f} s (screening + proof); reduced stack: "
          f"{shapes.get('reduced_summary', '-')}; confirmation: "
          f"{report.confirmation.describe() if report.confirmation else 'none'}")
    print(f"   {t1 - t0:.1f} s wall, {time.process_time() - c0:.1f} s CPU (this process), peak RSS {peak:.2f} GB "
          f"(the largest gloo rank process: {child:.2f} GB)")
    if not args.no_step:
        print(f"2. the training step at dp{DP} tp{TP}, {MICRO} microbatches (toy widths, 1 layer, "
              f"{DP * TP} ranks); features in this tree: {features()}")
        r = step(args.step_timeout)
        print(f"   {json.dumps(r)}")
    print(f"total {time.perf_counter() - t0:.1f} s wall")


if __name__ == "__main__":
    main()
