"""Executors side by side (issue 16): the zoo's Llama training step (dp2 x tp2, 2 microbatches,
AdamW, clipping) verified by the CLI with its ranks captured serially, on the local process
pool and on a local Ray instance (started by the run, on loopback), one process per run,
runs interleaved. Prints wall seconds (the whole command: interpreter, imports, Ray's start),
the report's stage seconds, and whether every report equals the serial one apart from timings.

    python bench/executors.py [--repeat R] [--workers K] [--case PATH --world-size N]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from shardproof.engine.executor import without_timings  # noqa: E402
LLAMA = os.path.join(ROOT, "src", "shardproof", "zoo", "train", "llama_block_train.py")
EXECUTORS = ("serial", "local", "ray")


def run(executor: str, case: str, world: int, workers: int, out: str) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "shardproof", "verify", case, "--world-size", str(world), "--executor", executor,
           "--json", out, "-qq"] + (["--workers", str(workers)] if executor != "serial" else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "src"), os.environ.get("PYTHONPATH", "")])}
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    with open(out) as f:
        return wall, json.load(f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--case", default=LLAMA)
    ap.add_argument("--world-size", type=int, default=4)
    args = ap.parse_args()
    rows, reference = [], None
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            for executor in EXECUTORS:
                wall, report = run(executor, args.case, args.world_size, args.workers, os.path.join(tmp, "r.json"))
                stages = report["stats"]["timings"]["stages"]
                rows.append((executor, i + 1, wall, stages, report["status"]))
                same = without_timings(report)
                reference = reference or same
                if same != reference:
                    print(f"DIFFERENT REPORT: {executor}, run {i + 1}")
    print(f"{os.path.relpath(args.case, ROOT)} at world size {args.world_size}, {args.workers} workers\n")
    print("| executor | run | wall s | capture s | proof s | confirm s | verdict |")
    print("|---|---|---|---|---|---|---|")
    for executor, i, wall, st, status in rows:
        print(f"| {executor} | {i} | {wall:.1f} | {st.get('capture', 0):.2f} | {st['proof']:.2f} | "
              f"{st['confirm']:.2f} | {status} |")


if __name__ == "__main__":
    main()
