"""Execute the real graph dumps (../shared/graphs/entangle, or --graphs DIR) with torch's
kernels (``shardproof.frontends.torch_exec``) and check the expected output relations of
``examples/dumps/*.yaml`` on the executed values. Prints, per pair: the estimated peak, the
seconds, the peak memory seen, and each output's largest relative difference (or why it
could not run). Never gates anything: a measurement.

    python bench/exec_real_dumps.py [--device cuda] [--graphs DIR] [--only NAME ...] [--limit-gb N]

Measured (2026-11-27, torch 2.11, one H200 with 16 CPU cores and 128 GiB; seed 0):

| pair | estimate | execute (GPU) | peak GPU | execute (CPU) | peak RSS | result |
| --- | --- | --- | --- | --- | --- | --- |
| aws_llama tp1 vs tp2 | 3.9 GiB | 1.9 s | 2.2 GiB | 0.4 s | 5.6 GiB | holds (2.5e-10) |
| aws_llama tp2.broken | 3.9 GiB | 0.9 s | 2.2 GiB | 0.3 s | 5.6 GiB | out1 broken (3.5e4) |
| qwen2 paral1 vs paral2 | 9.6 GiB | 3.7 s | 11.4 GiB | | | holds (2.1e-11) |
| gpt (dropout 0.1) | 27 GiB | | | | | not executable (native_dropout); since: corresponding draws (engine/rng.py) |
| gpt, dropout p = 0 | 27 GiB | 3.1 s | 27.0 GiB | 32.5 s | 30 GiB | holds (0 / 6e-16) |
| LN all-reduce bug, bw | 100 GiB | 15.1 s | 103.9 GiB | | | add_13 broken (1.3e2) |
| LN all-reduce bug, fw+bw | 75 GiB | | | | | not executable (_tensor_constant0 unprinted) |

(load + draw: 4-9 s each; the bw pair's 159 s is drawing and deriving 100 GiB of inputs.)

gpt with dropout 0.1, since corresponding draws (engine/rng.py): verified and confirmed through
``verify_dumps`` (``make confirm-gpt``) with f32 held as declared: peak RSS 16.2 GiB, 142 s CPU
(2-core machine under load, 12 min wall; 2026-11-27, torch 2.13).
"""
import argparse
import os
import re
import resource
import shutil
import sys
import tempfile
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from shardproof.api import prepare_dumps  # noqa: E402
from shardproof.engine.rng import plan_randomness  # noqa: E402
from shardproof.engine.verify import numeric_inputs  # noqa: E402
from shardproof.frontends.torch_exec import (NotExecutable, draw_inputs, draw_program_inputs,  # noqa: E402
                                             estimate_bytes, execute)
from shardproof.relations.spec import Partial, held  # noqa: E402

# name, single-device dir, distributed dir, relations file, kind, expectations, text edit of both sides
PAIRS = [
    ("aws_llama", "aws_llama/tp1_layer1", "aws_llama/tp2_layer1", "aws_llama.yaml", None, None, None),
    ("aws_llama.broken", "aws_llama/tp1_layer1", "aws_llama/tp2_layer1.broken", "aws_llama.yaml", None, None, None),
    ("qwen2", "qwen2/paral1_layer1", "qwen2/paral2_layer1", "qwen2.yaml", "fw", None, None),
    ("gpt", "gpt/paral1_layer1", "gpt/paral2_layer1", "megatron_gpt.yaml", "fw", None, None),
    # the same programs without dropout (p = 0.1 -> 0): deterministic, so executable
    ("gpt.p0", "gpt/paral1_layer1", "gpt/paral2_layer1", "megatron_gpt.yaml", "fw", None,
     (r"(native_dropout\.default\([^,]+, )0\.1", r"\g<1>0.0")),
    ("ln_allreduce.bug fw+bw", "bug_missing_layernorm_allreduce/tp1", "bug_missing_layernorm_allreduce/tp2.bug",
     "missing_layernorm_allreduce_both.yaml", "both", {"add_13": "Replicate()"}, None),
    ("ln_allreduce.bug bw", "bug_missing_layernorm_allreduce/tp1", "bug_missing_layernorm_allreduce/tp2.bug",
     "missing_layernorm_allreduce.yaml", "bw", {"add_13": "Replicate()"}, None),
    ("grad_acc.bug", "bug_grad_accumulation/1step", "bug_grad_accumulation/2step.bug", "grad_accumulation.yaml",
     None, None, None),
]


def _edited(path: str, edit) -> str:
    if edit is None:
        return path
    out = tempfile.mkdtemp()
    for name in os.listdir(path):
        with open(os.path.join(path, name), encoding="utf-8") as f:
            text = f.read()
        text = re.sub(edit[0], edit[1], text)
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            f.write(text)
    return out


def _worst(rel, s_val, vals) -> float:
    s_val = np.asarray(s_val, dtype=np.float64)
    if isinstance(rel, Partial):
        pairs = [({"sum": np.sum, "avg": np.mean, "max": np.max, "min": np.min}[rel.op](np.stack(vals), 0), s_val)]
    else:
        pairs = [(v, held(s_val, rel.layout(s_val.shape, r, len(vals)))) for r, v in enumerate(vals)]
    worst = 0.0
    for a, b in pairs:
        a = np.asarray(a, dtype=np.float64)
        if a.shape != b.shape:
            return float("inf")
        worst = max(worst, float(np.nanmax(np.abs(a - b) / (1e-3 + np.abs(b)), initial=0.0)))
        if np.isnan(a).any() != np.isnan(b).any():
            return float("inf")
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graphs", default=os.path.join(ROOT, "..", "shared", "graphs", "entangle"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--limit-gb", type=float, default=100.0)
    ap.add_argument("--scale", type=float, default=1.0, help="float inputs drawn with this standard deviation")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--print", action="store_true", help="print scalar outputs")
    a = ap.parse_args()
    for name, seq, dist, rel, kind, expect, edit in PAIRS:
        if a.only and name not in a.only:
            continue
        s_dir, d_dir = (_edited(os.path.join(a.graphs, x), edit) for x in (seq, dist))
        t0 = time.perf_counter()
        p = prepare_dumps(s_dir, d_dir, os.path.join(ROOT, "examples", "dumps", rel), auto_relations=True,
                          kind=kind, expect=expect)
        peak, big, size = estimate_bytes(p.seq, p.dist)
        line = f"{name}: estimate {peak / 2 ** 30:.1f} GiB (largest {big}: {size / 2 ** 30:.1f} GiB)"
        if peak > a.limit_gb * 2 ** 30:
            print(line, "-> over the limit, not run", flush=True)
            continue
        if a.scale == 1.0:
            s_in, d_in = draw_program_inputs(p.seq, p.dist, p.bindings, a.seed)
        else:  # the same draw, float inputs scaled, the ranks' values derived from them
            drawn = draw_inputs(p.seq, a.seed)
            drawn = {k: v * a.scale if v.dtype.kind == "f" else v for k, v in drawn.items()}
            s_in, d_in = numeric_inputs(p.seq, p.dist, p.bindings, drawn, a.seed)
        t1 = time.perf_counter()
        if a.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        try:
            s_out, d_out = execute(p.seq, p.dist, s_in, d_in, device=a.device, seed=a.seed,
                                   randomness=plan_randomness(p.seq, p.dist, p.bindings))  # dropout: corresponding draws
        except NotExecutable as exc:
            print(line, f"-> not executable: {exc}", flush=True)
            continue
        t2 = time.perf_counter()
        mem = (torch.cuda.max_memory_allocated() if a.device.startswith("cuda")
               else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        worst = {o: _worst(r, s_out[o], [d[o] for d in d_out]) for o, r in p.expect.items()}
        print(line, f"-> load+draw {t1 - t0:.1f} s, execute {t2 - t1:.1f} s, peak {mem / 2 ** 30:.1f} GiB "
              f"({'GPU' if a.device.startswith('cuda') else 'RSS'}); worst relative difference per expected "
              f"output: " + ", ".join(f"{o} ({p.expect[o]}): {w:.2e}" for o, w in worst.items()), flush=True)
        if a.print:
            for o in p.expect:
                if s_out[o].size == 1:
                    print(f"   {o}: single device {s_out[o].item()!r}, ranks {[d[o].item() for d in d_out]}")
        for x in (s_dir, d_dir):
            if edit is not None:
                shutil.rmtree(x, ignore_errors=True)
        del s_in, d_in, s_out, d_out
        if a.device.startswith("cuda"):
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
