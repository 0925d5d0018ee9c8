"""The pipeline configuration (issue 18; a table, never gating): the Llama training step at
dp2 x pp2 x tp2 under 1F1B (src/shardproof/zoo/train/pipeline_llama_3d.py: 2 Llama blocks, one per
stage, Megatron TP inside each, batch_isend_irecv between the stages), beside VERDICT's 2-layer
Llama-3 dp2 pp2 tp2 M2 plan. Rows, each in its own process (its peak RSS is its own):

* ``toy``: our shapes (hidden 16, 4 heads, 2 KV heads, ffn 32), M2 and M4: capture (wall, CPU),
  the proof (the engine, no confirmation by execution), traced nodes, verdict, peak RSS;
* ``8b``: VERDICT's plan shapes (Llama-3-8B blocks: hidden 4096, 32 heads, 8 KV heads, ffn 14336),
  M2, on fake tensors (``FakeTensorMode``, as bench/llama_fake.py): the capture only (fake
  tensors hold no values to relate the inputs by).

    python bench/pipeline.py [--quick]
"""
import argparse
import json
import os
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from scale import run_row  # noqa: E402
ZOO = os.path.join(HERE, "..", "src", "shardproof", "zoo")
LLAMA3_8B = dict(hidden=4096, heads=32, kv_heads=8, ffn=14336)
SEQ_8B = 8  # VERDICT's plans reduce shapes too (its "shape reduction"); the sequence here is short


def _case(shapes: dict | None, microbatches: int):
    for d in (ZOO, os.path.join(ZOO, "train")):
        if d not in sys.path:
            sys.path.insert(0, d)
    import pipeline_llama_3d as p3
    if shapes:
        p3.HIDDEN, p3.FFN, p3.SEQ = shapes["hidden"], shapes["ffn"], SEQ_8B
        return p3.case(8, microbatches=microbatches, batch=2 * microbatches, heads=shapes["heads"],
                       kv_heads=shapes["kv_heads"], name="pipeline_llama_3d_8b")
    return p3.case(8, microbatches=microbatches, batch=2 * microbatches)


def one(kind: str, microbatches: int) -> dict:
    import torch
    from shardproof.api import NO_CONFIRM, capture_case, prepare, verify_prepared
    torch.set_num_threads(1)
    row = {"config": kind, "M": microbatches}
    if kind == "toy":
        capture_case(_case(None, 1), 8)  # warm-up: imports, caches
        case = _case(None, microbatches)
        t0, c0 = time.perf_counter(), time.process_time()
        p = prepare(case, 8)
        row.update(capture_s=time.perf_counter() - t0, capture_cpu_s=time.process_time() - c0)
        t1, c1 = time.perf_counter(), time.process_time()
        report = verify_prepared(p, confirm_draws=NO_CONFIRM, fixes=False)
        row.update(prove_s=time.perf_counter() - t1, prove_cpu_s=time.process_time() - c1)
        proved = report.status == "unknown" and (report.reason or "").startswith("proved, but not confirmed")
        row["verdict"] = "proved" if proved else report.status
        graphs = [p.seq] + list(p.dist.graphs)
    else:
        from torch._subclasses.fake_tensor import FakeTensorMode
        mode = FakeTensorMode(allow_non_fake_inputs=True)  # the schedule makes its receive buffers (real) mid-trace
        with mode:
            case = _case(LLAMA3_8B, microbatches)

        def make(rank, world, build=case.distributed):
            with mode:
                return build(rank, world)
        case.distributed = make
        from shardproof.frontends import torch_train as tt
        t0, c0 = time.perf_counter(), time.process_time()  # as bench/llama_fake.py: no redraw (fake values)
        graphs = [tt.capture_single_step(case.single, case.inputs, case.train)[0]]
        graphs += [tt.capture_rank_step(make, r, 8, case.dist_inputs(r, 8, case.inputs), case.train)[0]
                   for r in range(8)]
        row.update(capture_s=time.perf_counter() - t0, capture_cpu_s=time.process_time() - c0, verdict="captured")
    row["nodes"] = sum(len(g.nodes) for g in graphs)
    row["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="the toy rows only")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        kind, m = args.one.split(",")
        print(json.dumps(one(kind, int(m))))
        return
    todo = [("toy", 2), ("toy", 4)] + ([] if args.quick else [("8b", 2)])
    print("| plan | M | traced nodes | capture s (wall) | capture s (CPU) | proof s (wall) | proof s (CPU) "
          "| verdict | peak MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("| VERDICT 2-layer Llama-3 dp2 pp2 tp2 (its artifact, quoted) | 2 | - | - | - | ~14 (2 cores) | - "
          "| SUCCESS | - |")
    for kind, m in todo:
        r = run_row([sys.executable, os.path.abspath(__file__), "--one", f"{kind},{m}"])
        if isinstance(r, str):
            print(f"| {kind} | {m} | failed: {r} |")
            continue
        print(f"| shardproof {'toy shapes' if kind == 'toy' else '8B block shapes, fake'} | {m} | {r['nodes']} "
              f"| {r['capture_s']} | {r['capture_cpu_s']} | {r.get('prove_s', '-')} | {r.get('prove_cpu_s', '-')} "
              f"| {r['verdict']} | {r['peak_mb']} |", flush=True)


if __name__ == "__main__":
    main()
