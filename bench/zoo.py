"""Seconds per zoo case at TP 2/4/8: capture (tracing every rank) and verification
(the engine alone), and for the real graph dumps in ../shared/graphs: import (reading
the text) and verification. Printed as tables; never gates anything."""
import glob
import importlib
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO = os.path.join(ROOT, "src", "shardproof", "zoo")
sys.path[:0] = [ZOO, os.path.join(ZOO, "bugs")]

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from shardproof.api import InputError, prepare, prepare_dumps, verify_prepared  # noqa: E402

GRAPHS = os.path.join(ROOT, "..", "shared", "graphs", "entangle")
# (name, single-device dir, distributed dir, relations file, kind, expectations)
DUMPS = [
    ("Megatron GPT fw", "gpt/paral1_layer1", "gpt/paral2_layer1", "megatron_gpt.yaml", "fw", None),
    ("vLLM Qwen2 fw", "qwen2/paral1_layer1", "qwen2/paral2_layer1", "qwen2.yaml", "fw", None),
    ("Megatron LN-grad bug fw+bw", "bug_missing_layernorm_allreduce/tp1", "bug_missing_layernorm_allreduce/tp2.bug",
     "missing_layernorm_allreduce_both.yaml", "both", {"add_13": "Replicate()"}),
    ("Megatron LN-grad bug bw", "bug_missing_layernorm_allreduce/tp1", "bug_missing_layernorm_allreduce/tp2.bug",
     "missing_layernorm_allreduce.yaml", "bw", {"add_13": "Replicate()"}),
    ("HF grad accumulation bug", "bug_grad_accumulation/1step", "bug_grad_accumulation/2step.bug",
     "grad_accumulation.yaml", None, None),
    ("AWS Llama HLO", "aws_llama/tp1_layer1", "aws_llama/tp2_layer1", "aws_llama.yaml", None, None),
    ("AWS Llama HLO broken", "aws_llama/tp1_layer1", "aws_llama/tp2_layer1.broken", "aws_llama.yaml", None, None),
]

WORLDS = (2, 4, 8)


def main() -> None:
    table = Table(title="shardproof zoo benchmark (seconds)")
    for col in ("case", "TP", "verdict", "capture s", "verify s", "total s", "dist nodes"):
        table.add_column(col, justify="right" if col != "case" else "left")
    for path in sorted(glob.glob(os.path.join(ZOO, "[!_]*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        module = importlib.import_module(name)
        for w in WORLDS:
            if w not in getattr(module, "WORLD_SIZES", WORLDS):
                continue
            t0 = time.perf_counter()
            try:
                p = prepare(module.case(w), w)
            except InputError as exc:
                table.add_row(name, str(w), f"input error: {exc}"[:40], "-", "-", "-", "-")
                continue
            t1 = time.perf_counter()
            report = verify_prepared(p)
            t2 = time.perf_counter()
            table.add_row(name, str(w), report.status, f"{t1 - t0:.2f}", f"{t2 - t1:.3f}", f"{t2 - t0:.2f}",
                          str(report.stats.get("nodes_dist", "")))
    Console().print(table)
    dumps()


def dumps() -> None:
    if not os.path.isdir(GRAPHS):
        print(f"(no graph dumps: {os.path.normpath(GRAPHS)} not found)")
        return
    table = Table(title="graph dumps (seconds)")
    for col in ("pair", "ranks", "verdict", "import s", "verify s", "nodes/rank", "import ms per 100 nodes"):
        table.add_column(col, justify="right" if col != "pair" else "left", no_wrap=col == "pair")
    for name, seq, dist, relations, kind, expect in DUMPS:
        t0 = time.perf_counter()
        p = prepare_dumps(os.path.join(GRAPHS, seq), os.path.join(GRAPHS, dist),
                          relations_file=os.path.join(ROOT, "examples", "dumps", relations), auto_relations=True,
                          expect=expect, kind=kind)
        t1 = time.perf_counter()
        report = verify_prepared(p)
        t2 = time.perf_counter()
        nodes = max(len(g.nodes) for g in p.dist.graphs)
        total = len(p.seq.nodes) + sum(len(g.nodes) for g in p.dist.graphs)
        table.add_row(name, str(p.dist.world_size), report.status, f"{t1 - t0:.3f}", f"{t2 - t1:.3f}", str(nodes),
                      f"{1000 * (t1 - t0) / total * 100:.1f}")
    Console().print(table)


if __name__ == "__main__":
    main()
