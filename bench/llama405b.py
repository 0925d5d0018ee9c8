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
    python bench/llama405b.py --e2e [--layers 126] [--seq 8192] [--confirm-dp 2] [--json out.json]

``--e2e``: the plan as ONE verification (``llama_plan.verify_llama_plan``, composed by
``shardproof.plan_e2e``): stage ``layers`` (part 1 above), stage ``step`` (the training
step at dp64 tp8 M16, every rank, at the reduced widths of part 1, proved by the engine and
confirmed on gloo at dp `--confirm-dp`), then stage ``tail`` (the step with all the layers at
dp `--tail-dp`, by step contracts: one proved update per parameter class; 0, the default: no such
stage); per stage its wall and CPU seconds and peak RSS, the
plan's verdict, and what each stage proved where (``report.plan``).
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

import llama_plan as P  # noqa: E402

LAYERS, DP, TP, MICRO = 126, 64, 8, 16
FEATURES = {"rank classes (symmetry over dp)": "shardproof.frontends.rank_classes",
            "a proof per rank class": "shardproof.engine.classes",
            "microbatch loops derived (traced once per distinct program)": "shardproof.frontends.microbatches",
            "step contracts (blocks + the step's tail)": "shardproof.step_blocks"}


def stack(n_layers: int, seq: int):
    """Part 1: the stack proved at the real sizes, confirmed at reduced widths."""
    return P.layers_stage(P.PlanSpec(layers=n_layers, seq=seq))


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


def e2e(args) -> None:
    """The whole plan as one verification (module docstring, ``--e2e``)."""
    spec = P.PlanSpec(layers=args.layers, seq=args.seq, confirm_dp=args.confirm_dp, tail_dp=args.tail_dp or None,
                      tail_microbatches=args.tail_m or None, tail_confirm_layers=args.tail_confirm_layers or None)
    t0 = time.perf_counter()

    def show(s):
        print(f"{s['stage']}: {s['status']} -- {s['covers']}\n   proved at {s['proved']}\n   confirmed "
              f"{s['confirmed']}\n   {s.get('wall_seconds', 0):.1f} s wall, {s.get('cpu_seconds', 0):.1f} s CPU, "
              f"peak RSS {s.get('peak_rss_mb', 0)} MB (largest child {s.get('peak_child_rss_mb', 0)} MB)"
              + (f"\n   machinery: {s['machinery']}" if s.get("machinery") else "")
              + (f"\n   {s['reason']}" if s["reason"] else ""), flush=True)
    report = P.verify_llama_plan(spec, on_stage=show)
    print("not covered: " + "; ".join(report.plan["not_covered"]))
    print(f"plan: {report.status}{' (' + report.reason + ')' if report.reason else ''}; "
          f"{time.perf_counter() - t0:.1f} s wall, peak RSS {report.plan['peak_rss_mb']} MB "
          f"(largest child {report.plan['peak_child_rss_mb']} MB)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report.to_json(), f, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=LAYERS)
    ap.add_argument("--seq", type=int, default=8192, help="sequence length at the real sizes")
    ap.add_argument("--no-step", action="store_true", help="skip part 2 (the dp64 tp8 M16 step)")
    ap.add_argument("--step-timeout", type=int, default=900)
    ap.add_argument("--e2e", action="store_true", help="the whole plan as one verification (stages)")
    ap.add_argument("--confirm-dp", type=int, default=2, help="--e2e: the dp the step is executed at on gloo")
    ap.add_argument("--tail-dp", type=int, default=0, help="--e2e: stage tail's dp (0: no stage tail; at 126 "
                    "layers, M2, confirmed with 2 layers, it used 313 CPU s and 9.65 GB: over the budget, "
                    "bench/README.md section 15)")
    ap.add_argument("--tail-m", type=int, default=P.PlanSpec.tail_microbatches or 0,
                    help="--e2e: stage tail's microbatches (0: the plan's)")
    ap.add_argument("--tail-confirm-layers", type=int, default=P.PlanSpec.tail_confirm_layers or 0,
                    help="--e2e: stage tail executed on gloo with this many layers (0: all)")
    ap.add_argument("--json", help="--e2e: write the report here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.e2e:
        return e2e(args)
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
