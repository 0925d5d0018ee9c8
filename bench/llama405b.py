"""The Llama-3-405B-like plan of issue 16 (126 layers, dp64 tp8, 16 microbatches; hidden 16384,
128 heads, 8 KV heads, ffn 53248, vocab 128256), end to end on this machine, by block
contracts (shardproof.blocks). What is proved and what is executed, exactly:

1. The 126-layer stack, forward and backward, on one tp8 group, at *reduced* sizes with the
   same program structure: 128 query heads, 8 KV heads, tp8 (16 query heads and 1 KV head per
   rank), head_dim 2 (hidden 256), ffn 64. Every layer is captured (single device and 8 ranks)
   and hashed; identical blocks are proved once by the engine; contracts are chained; the
   distinct block's proof is confirmed by running it on a gloo group of 8 processes.
2. The stack at the *real* 405B sizes, on fake tensors (shapes only, no memory for values):
   every layer's block run on the single device and the 8 tp ranks with its dispatched ops
   recorded (all layers must record the same), and the first layer captured with make_fx
   and its structure (ops, dataflow, dtypes, group names; sizes and numeric constants
   erased) compared with the proved block's. The engine is not run at these sizes: it relates inputs by value and
   evaluates numerically, and 405B tensors hold no values here (a 16384 x 53248 weight is
   3.5 GB in float32). So the real sizes are *captured and structurally matched*, not proved.
3. dp64 and 16 microbatches: no dp symmetry or microbatch induction on this base. A block
   contract is per tp-rank class and holds for all input values; the blocks issue no dp
   collective (only the step's gradient reduction does), so each of the 64 dp replicas and
   each of the 16 microbatches runs the proved block programs on its own data. That argument
   is reported, not checked; the step's tail (loss, accumulation over microbatches, the dp
   gradient all_reduce, clipping, the optimizer) and the vocab-sized embedding/head are not
   part of this run.

    python bench/llama405b.py [--layers 126]
"""
import argparse
import os
import resource
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src", "shardproof", "zoo", "train"))

import torch  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

import llama_layers as L  # noqa: E402
from llama_block import LlamaBlock  # noqa: E402
from shardproof.blocks import verify_blocks  # noqa: E402
from shardproof.engine.blocks import structure_key  # noqa: E402
from shardproof.frontends import torch_capture as tc  # noqa: E402
from shardproof.frontends.torch_blocks import BlockVJP, dispatch_text, screening  # noqa: E402
from shardproof.frontends.torch_capture import fake_world  # noqa: E402

LAYERS, DP, TP, MICRO, VOCAB = 126, 64, 8, 16, 128256
REAL = dict(hidden=16384, heads=128, kv_heads=8, ffn=53248)
REDUCED = dict(hidden=256, heads=128, kv_heads=8, ffn=64)  # head_dim 2: the same heads, KV heads and tp
ROWS, SEQ = 1, 4


def _data(hidden):
    return torch.randn(ROWS, SEQ, hidden), torch.randn(ROWS, SEQ, hidden)


def reduced_stack(n_layers):
    torch.manual_seed(0)
    x, g = _data(REDUCED["hidden"])
    return verify_blocks(L.full_layers(n_layers, **REDUCED), L.parallel_layer(), x, g, TP,
                         name="llama405b-like, reduced", confirm_draws=0)


def real_layers(n_layers):
    """The stack at the real sizes on fake tensors: every layer's block run on the single
    device and the tp ranks, its dispatched ops recorded (equal records: equal programs); the
    first layer also captured with make_fx (single device and the tp ranks), for its structure."""
    mode = FakeTensorMode()
    make = L.parallel_layer()
    with mode:
        x, g = _data(REAL["hidden"])
    first, graphs, params = None, [], 0
    same = True
    for i in range(n_layers):
        with mode:
            full = LlamaBlock(REAL["hidden"], REAL["heads"], REAL["kv_heads"], REAL["ffn"])

        def rank_program(rank, world, i=i, full=full):
            with mode:
                return BlockVJP(make(i, full, rank, world))
        with mode, screening():
            texts = [dispatch_text(BlockVJP(full), {"x": x, "g": g})]
            for rank in range(TP):
                with fake_world(rank, TP):
                    texts.append(dispatch_text(rank_program(rank, TP), {"x": x, "g": g}))
        if first is None:
            first, params = texts, sum(p.numel() for p in full.parameters())
            graphs = [tc.capture_single(BlockVJP(full), {"x": x, "g": g})]
            graphs += [tc.capture_rank(rank_program, rank, TP, {"x": x, "g": g})[0] for rank in range(TP)]
        same = same and texts == first
    return graphs, params, same


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=LAYERS)
    ap.add_argument("--real-layers", type=int, help="layers run at the real sizes (default: all)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    t0, c0 = time.perf_counter(), time.process_time()
    report = reduced_stack(args.layers)
    t1 = time.perf_counter()
    real, params, identical = real_layers(args.real_layers or args.layers)
    t2 = time.perf_counter()
    proved = [c["structure"] for c in report.blocks["contracts"]]
    same = len(proved) == 1 and structure_key(real) == proved[0]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # the largest gloo rank process
    print(f"{args.layers} layers (Llama-3-405B block: {params / 1e9:.2f} B parameters a layer, "
          f"{args.layers * params / 1e9:.0f} B in the stack), tp{TP}")
    print(f"  reduced sizes {REDUCED}: {report.blocks['summary']}; engine verdict: {report.status}"
          f"{' (' + report.reason + ')' if report.reason else ''}; "
          f"confirmation: {report.confirmation.describe() if report.confirmation else 'none'}; {t1 - t0:.1f} s")
    nodes = sum(len(gr.nodes) for gr in real)
    print(f"  real sizes {REAL} on fake tensors: {args.real_layers or args.layers} layers run on the single device "
          f"and {TP} ranks, all dispatching the same ops: {identical}; layer 0 captured ({nodes} nodes), the same "
          f"structure as the proved block: {same}; {t2 - t1:.1f} s")
    print(f"  dp{DP} and {MICRO} microbatches: not run (per tp-rank class contracts; see the docstring)")
    print(f"total {time.perf_counter() - t0:.1f} s wall, {time.process_time() - c0:.1f} s CPU (this process; the gloo "
          f"confirmation runs 8 more), peak RSS {peak:.2f} GB (the largest rank process: {child:.2f} GB)")


if __name__ == "__main__":
    main()
