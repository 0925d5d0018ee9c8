"""The scaling sweep of issue 16 (a table; never gates anything): the Llama training step of
bench/llama_stack.py (hidden 32, 16 heads, 8 KV heads, AdamW, clipping) with one axis
varied at a time from N1 dp2 tp2 M2 -- layers N in {1,2,4,8}, tp in {2,4,8}, dp in {2,4,8},
microbatches M in {2,4,8}. Each configuration runs in its own process (its peak RSS is its
own): capture (wall and CPU seconds, CPU ms per traced node), the proof (the engine, no
confirmation by execution), the engine's verdict, peak memory.

    python bench/scale.py [--quick] [--workers K] [--no-symmetry] [--no-class-proof] [--no-induction]
                          [--no-parametric] [--whole-loops] [--confirm] [--repeat K] [--only N,dp,tp,M ...]
    python bench/scale.py --blocks [--only N,tp ...]
    python bench/scale.py --step-blocks [--no-tail-contracts] [--only N ...]

The table ends with the ratios of issue 16 (dp8/dp2, M8/M2, N8/N1: capture + proof wall).
``--blocks``: the layer stack of the same model (N Llama blocks on one tp group, forward and
backward) verified by block contracts (shardproof.blocks: each layer captured alone, identical
blocks proved once, contracts chained): wall and CPU seconds, capture vs proof, and N8/N1.
``--step-blocks``: the whole training step of the sweep's model (N layers, dp2 tp2 M2) by
shardproof.step_blocks.verify_step (layers screened, one contract per distinct block, the tail
proved once with each layer an opaque call): wall and CPU seconds per part, and N8/N1.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BASE = (1, 2, 2, 2)  # N, dp, tp, M
SWEEP = {"N": (1, 2, 4, 8), "dp": (2, 4, 8), "tp": (2, 4, 8), "M": (2, 4, 8)}
QUICK = {"N": (1, 2), "dp": (2, 4), "tp": (2, 4), "M": (2, 4)}


def configs(sweep) -> list:
    out = []
    for axis, values in sweep.items():
        for v in values:
            c = list(BASE)
            c[("N", "dp", "tp", "M").index(axis)] = v
            if tuple(c) not in out:
                out.append(tuple(c))
    return out


def one(n_layers, dp, tp, microbatches, workers=None, symmetry=True, class_proof=True, whole_loops=False,
        confirm=False, induction=True, parametric=True) -> dict:
    """Capture and prove one configuration in this process (`whole_loops`: every microbatch
    traced, frontends/microbatches.py off; `confirm`: then the confirmation by execution, timed
    on its own)."""
    sys.path.insert(0, HERE)
    import torch
    import llama_stack
    from shardproof import api
    from shardproof.api import NO_CONFIRM, capture_case, prepare, verify_prepared
    torch.set_num_threads(1)
    api.SYMMETRY = symmetry
    from shardproof.engine import symbolic
    symbolic.CLASS_PROOF = class_proof
    from shardproof.engine import parametric as dp_param
    dp_param.PARAMETRIC = parametric
    from shardproof.frontends import microbatches as mb_loops
    mb_loops.ENABLED = not whole_loops
    from shardproof.engine import induction as mb_induction
    mb_induction.INDUCTION = induction
    capture_case(llama_stack.case(1, 1, 2, 1), 2)  # warm-up: imports, caches
    case = llama_stack.case(n_layers, dp, tp, microbatches)
    options = {} if workers is None else {"workers": workers}
    t0, c0 = time.perf_counter(), time.process_time()
    p = prepare(case, dp * tp, **options)
    capture_s, capture_cpu = time.perf_counter() - t0, time.process_time() - c0
    t1, c1 = time.perf_counter(), time.process_time()
    report = verify_prepared(p, confirm_draws=None if confirm else NO_CONFIRM, fixes=False)
    conf = report.confirmation.seconds if confirm and report.confirmation else 0.0  # every microbatch run on gloo
    prove_s, prove_cpu = time.perf_counter() - t1 - conf, time.process_time() - c1
    nodes = len(p.seq.nodes) + sum(len(g.nodes) for g in p.dist.graphs)
    traced = len(p.dist.classes) if p.dist.classes else dp * tp  # ranks traced (one per class with symmetry)
    loops = [c["microbatch_loop"]["traced"] for c in p.dist.classes if c.get("microbatch_loop")]
    confirmed = {"confirm_s": round(conf, 2), "confirmed": report.status} if confirm else {}
    proved = report.status == "verified" or (report.status == "unknown" and (report.reason or "").startswith(
        "proved, but not confirmed"))
    engine = "proved" if proved else report.status  # confirmation by execution is not run here
    return {"N": n_layers, "dp": dp, "tp": tp, "M": microbatches, "ranks": dp * tp, "traced": traced, "nodes": nodes,
            "capture_s": round(capture_s, 2), "capture_cpu_s": round(capture_cpu, 2),
            "ms_per_node": round(1000 * capture_cpu / nodes, 3), "prove_s": round(prove_s, 2),
            "prove_cpu_s": round(prove_cpu, 2),
            "verdict": engine, "reason": (report.reason or "")[:80], "loops_traced": loops, **confirmed,
            "by_induction": (report.stats.get("microbatch_induction") or {}).get("by_induction", []),
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def one_blocks(n_layers, tp) -> dict:
    """Verify an N-layer stack by block contracts in this process (no confirmation by execution)."""
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src", "shardproof", "zoo", "train"))
    import llama_layers as L
    from shardproof.api import NO_CONFIRM
    from shardproof.blocks import verify_blocks
    torch.set_num_threads(1)

    def run(n):
        torch.manual_seed(0)
        x, g = torch.randn(L.ROWS, L.SEQ, L.HIDDEN), torch.randn(L.ROWS, L.SEQ, L.HIDDEN)
        return verify_blocks(L.full_layers(n), L.parallel_layer(), x, g, tp, confirm_draws=NO_CONFIRM)
    run(1)  # warm-up: imports, caches
    t0, c0 = time.perf_counter(), time.process_time()
    report = run(n_layers)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"N": n_layers, "tp": tp, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "prove_s": round(report.stats.get("seconds", 0), 2), "blocks": report.blocks["summary"],
            "reason": (report.reason or "")[:60], "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def one_step_blocks(n_layers, tail_contracts=True) -> dict:
    """Verify the sweep's training step (N layers, dp2 tp2 M2) by step-level block contracts
    in this process (no confirmation by execution). `tail_contracts` False: the tail as before
    step_tail.py (every update traced op by op, every rank of the opaque step traced)."""
    sys.path.insert(0, HERE)
    import torch
    import llama_stack
    from shardproof import step_blocks
    from shardproof.api import NO_CONFIRM, capture_case
    from shardproof.frontends import rank_classes
    from shardproof.step_blocks import verify_step
    step_blocks.TAIL_UPDATES = tail_contracts
    if not tail_contracts:
        rank_classes.OPAQUE_CALLS = ("no opaque call is grouped",)
    torch.set_num_threads(1)
    capture_case(llama_stack.case(1, 1, 2, 1), 2)  # warm-up: imports, caches (as the sweep's rows)
    t0, c0 = time.perf_counter(), time.process_time()
    report = verify_step(llama_stack.case(n_layers, 2, 2, 2), confirm_draws=NO_CONFIRM)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    stats = report.stats
    return {"N": n_layers, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            **{k: round(stats.get(f"{k}_seconds", 0), 2) for k in ("screen", "contract", "tail")},
            "blocks": report.blocks.get("summary"), "fallback": report.blocks.get("fallback", ""),
            "reason": (report.reason or "")[:40], "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def step_blocks_table(todo, extra=()) -> None:
    print("| N | dp | tp | M | wall s | CPU s | screen s | contracts s | tail s | blocks | engine verdict | peak MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = {}
    for n in todo:
        r = _subprocess(["--one-step-blocks", str(n), *extra])
        if isinstance(r, str):
            print(f"| {n} | 2 | 2 | 2 | failed: {r} |")
            continue
        rows[n] = r
        print(f"| {n} | 2 | 2 | 2 | {r['wall_s']} | {r['cpu_s']} | {r['screen']} | {r['contract']} | {r['tail']} "
              f"| {r['blocks']} | {r['fallback'] or r['reason']} | {r['peak_mb']} |", flush=True)
    lo = min(rows, default=None)
    for n in rows:
        if n != lo:
            print(f"N{n}/N{lo}: wall {rows[n]['wall_s'] / rows[lo]['wall_s']:.2f}, "
                  f"CPU {rows[n]['cpu_s'] / rows[lo]['cpu_s']:.2f}")


def blocks_table(todo) -> None:
    print("| N | tp | wall s | CPU s | proof s | blocks | engine verdict | peak MB |")
    print("|---|---|---|---|---|---|---|---|")
    walls = {}
    for c in todo:
        r = _subprocess(["--one-blocks", ",".join(map(str, c))])
        if isinstance(r, str):
            print(f"| {' | '.join(map(str, c))} | failed: {r} |")
            continue
        walls[(r["N"], r["tp"])] = r["wall_s"]
        print(f"| {r['N']} | {r['tp']} | {r['wall_s']} | {r['cpu_s']} | {r['prove_s']} | {r['blocks']} "
              f"| {r['reason']} | {r['peak_mb']} |", flush=True)
    for (n, tp), wall in walls.items():
        if n != 1 and (1, tp) in walls:
            print(f"N{n}/N1 wall (tp{tp}): {wall / walls[(1, tp)]:.2f}")


def run_row(cmd: list):
    """One configuration in its own process: the JSON row it prints last, or its last error line."""
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        return (out.stderr.strip().splitlines() or ["?"])[-1][:100]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _subprocess(args):
    """Run this script on `args` in a fresh process (see :func:`run_row`)."""
    return run_row([sys.executable, os.path.abspath(__file__)] + args)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a smaller sweep")
    ap.add_argument("--workers", type=int)
    ap.add_argument("--no-symmetry", action="store_true", help="trace every rank (the baseline before issue 16's symmetry)")
    ap.add_argument("--no-class-proof", action="store_true",
                    help="interpret every rank's ops (the proof before engine/classes.py)")
    ap.add_argument("--only", nargs="*", help="configurations N,dp,tp,M")
    ap.add_argument("--whole-loops", action="store_true", help="trace every microbatch (before issue 16's microbatch loops)")
    ap.add_argument("--no-induction", action="store_true",
                    help="interpret every microbatch (before engine/induction.py)")
    ap.add_argument("--confirm", action="store_true", help="also time the confirmation by execution (gloo), apart")
    ap.add_argument("--no-parametric", action="store_true",
                    help="prove every dp class member by its own rules (before engine/parametric.py)")
    ap.add_argument("--repeat", type=int, default=1, help="run each configuration K times; medians")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--blocks", action="store_true", help="the layer stack by block contracts (--only N,tp)")
    ap.add_argument("--one-blocks", help=argparse.SUPPRESS)
    ap.add_argument("--step-blocks", action="store_true", help="the whole step by block contracts (--only N ...)")
    ap.add_argument("--one-step-blocks", help=argparse.SUPPRESS)
    ap.add_argument("--no-tail-contracts", action="store_true",
                    help="--step-blocks with the tail as before step_tail.py (updates traced, every rank traced)")
    args = ap.parse_args()
    if args.one_step_blocks:
        print(json.dumps(one_step_blocks(int(args.one_step_blocks), not args.no_tail_contracts)))
        return
    if args.step_blocks:
        step_blocks_table([int(c) for c in args.only] if args.only else [1, 2, 8],
                          ["--no-tail-contracts"] * args.no_tail_contracts)
        return
    if args.one_blocks:
        print(json.dumps(one_blocks(*map(int, args.one_blocks.split(",")))))
        return
    if args.blocks:
        blocks_table([tuple(map(int, c.split(","))) for c in args.only] if args.only else [(1, 2), (8, 2)])
        return
    if args.one:
        print(json.dumps(one(*map(int, args.one.split(",")), workers=args.workers, symmetry=not args.no_symmetry,
                             class_proof=not args.no_class_proof, whole_loops=args.whole_loops,
                             confirm=args.confirm, induction=not args.no_induction,
                             parametric=not args.no_parametric)))
        return
    todo = [tuple(map(int, c.split(","))) for c in args.only] if args.only else configs(QUICK if args.quick else SWEEP)
    print("| N | dp | tp | M | ranks (traced) | nodes | capture s (wall) | capture s (CPU) | capture CPU ms / node "
          "| proof s (wall) | proof s (CPU) | engine verdict | peak MB | microbatches traced | by induction "
          "| confirm s (wall) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = {}
    for c in todo:
        extra = ["--workers", str(args.workers)] if args.workers is not None else []
        extra += ["--no-symmetry"] if args.no_symmetry else []
        extra += ["--no-class-proof"] if args.no_class_proof else []
        extra += ["--whole-loops"] * args.whole_loops + ["--confirm"] * args.confirm
        extra += ["--no-induction"] * args.no_induction + ["--no-parametric"] * args.no_parametric
        r = _median([_subprocess(["--one", ",".join(map(str, c))] + extra) for _ in range(args.repeat)])
        if isinstance(r, str):
            print(f"| {' | '.join(map(str, c))} | failed: {r} |")
            continue
        rows[c] = r
        print(f"| {r['N']} | {r['dp']} | {r['tp']} | {r['M']} | {r['ranks']} ({r['traced']}) | {r['nodes']} | {r['capture_s']} "
              f"| {r['capture_cpu_s']} | {r['ms_per_node']} | {r['prove_s']} | {r['prove_cpu_s']} | {r['verdict']} "
              f"| {r['peak_mb']} | {' '.join(map(str, r['loops_traced'])) or 'all'} "
              f"| {' '.join(map(str, r.get('by_induction') or [])) or '-'} "
              f"| {r.get('confirm_s', '-')} {r.get('confirmed', '')} |",
              flush=True)
    for line in ratios(rows):
        print(line)


def _median(runs: list):
    """One row of several runs of a configuration: each time its median (a failed run: its message)."""
    failed = [r for r in runs if isinstance(r, str)]
    if failed:
        return failed[0]
    out = dict(runs[0])
    for k in ("capture_s", "capture_cpu_s", "ms_per_node", "prove_s", "prove_cpu_s"):
        out[k] = sorted(r[k] for r in runs)[len(runs) // 2]
    return out


def ratios(rows: dict) -> list[str]:
    """Per axis swept (N, dp, M): the largest value's cost over the smallest's, in wall and CPU
    seconds of capture + proof (issue 16: dp8/dp2 and M8/M2 <= 1.3, N8/N1 <= 2.0)."""
    out = []
    for axis, i in (("N", 0), ("dp", 1), ("M", 3)):
        line = [c for c in rows if all(c[j] == BASE[j] for j in range(4) if j != i)]
        if len({c[i] for c in line}) < 2:
            continue
        lo, hi = min(line, key=lambda c: c[i]), max(line, key=lambda c: c[i])
        wall = [rows[c]["capture_s"] + rows[c]["prove_s"] for c in (lo, hi)]
        cpu = [rows[c]["capture_cpu_s"] + rows[c]["prove_cpu_s"] for c in (lo, hi)]
        out.append(f"{axis}{hi[i]}/{axis}{lo[i]}: capture+proof wall {wall[1] / wall[0]:.2f} "
                   f"({wall[1]:.2f} s / {wall[0]:.2f} s), CPU {cpu[1] / cpu[0]:.2f} ({cpu[1]:.2f} s / {cpu[0]:.2f} s)")
    return out


if __name__ == "__main__":
    main()
