"""Seconds per zoo case at TP 2/4/8: capture (tracing every rank) and verification
(the engine alone), printed as a table. Never gates anything."""
import glob
import importlib
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "examples"), os.path.join(ROOT, "examples", "bugs")]

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from shardproof.api import InputError, prepare, verify_prepared  # noqa: E402

WORLDS = (2, 4, 8)


def main() -> None:
    table = Table(title="shardproof zoo benchmark (seconds)")
    for col in ("case", "TP", "verdict", "capture s", "verify s", "total s", "dist nodes"):
        table.add_column(col, justify="right" if col != "case" else "left")
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*.py"))):
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


if __name__ == "__main__":
    main()
