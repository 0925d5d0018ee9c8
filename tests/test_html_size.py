"""The HTML page stays small and quick on real graphs: on the largest Megatron GPT dump at
hand (../shared/graphs), and on an 8-layer, 8-rank program built from its graph views (each
layer's nodes repeated under new names, each rank's relation texts carrying its own slice
offsets, as TP ranks' do): at most 1.5 MB, and at most 2 s for the views and the page."""
import json
import os
import re
import shutil
import time

import pytest

from shardproof.api import NO_CONFIRM, verify_dumps
from shardproof.engine import verify as engine_verify
from shardproof.engine.result import GraphView, NodeView
from shardproof.report.html import render_html
from test_html_report import _browse, page_data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPT = os.environ.get("SHARDPROOF_GPT_DUMPS") or os.path.join(ROOT, "..", "shared", "graphs", "entangle", "gpt")
RELATIONS = os.path.join(ROOT, "examples", "dumps", "megatron_gpt.yaml")
MAX_BYTES, MAX_SECONDS = 1_500_000, 2.0

pytestmark = pytest.mark.skipif(not os.path.isdir(GPT), reason=f"../shared/graphs absent: {os.path.normpath(GPT)} not found")


def _largest() -> tuple[str, str]:
    """(single-device dump, the distributed dump with the most ranks and lines)."""
    dirs = [os.path.join(GPT, d) for d in sorted(os.listdir(GPT))]
    size = {d: (len(os.listdir(d)), sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))) for d in dirs}
    seq = next(d for d in dirs if size[d][0] == 1)
    return seq, max((d for d in dirs if size[d][0] > 1), key=size.get)


@pytest.fixture(scope="module")
def gpt():
    """The largest GPT pair's report with views, and the seconds the views took."""
    seq, dist = _largest()
    spent = []

    def timed(fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent.append(time.perf_counter() - t)
        return wrapper

    from shardproof.engine import views
    with pytest.MonkeyPatch.context() as mp:  # the work that only views=True does
        mp.setattr(views, "graph_views", timed(views.graph_views))
        mp.setattr(engine_verify, "_status", timed(engine_verify._status))
        spent.clear()
        report = verify_dumps(seq, dist, relations_file=RELATIONS, auto_relations=True, views=True,
                              confirm_draws=NO_CONFIRM)  # the page, not the (minutes-long) execution
    return report, sum(spent[-2:])


def _layered(g: GraphView, layers: int, rank: int) -> GraphView:
    """`g` repeated `layers` times (names suffixed per layer), its slice offsets moved by rank."""
    def shift(text: str) -> str:
        return re.sub(r"\[([^\]]*)\]", lambda m: "[" + re.sub(r"\d+", lambda d: str(int(d.group()) + 7 * rank),
                                                               m.group(1)) + "]", text)
    nodes = []
    for k in range(layers):
        def own(name: str) -> str:
            return f"{name}_L{k}"
        nodes += [NodeView(own(n.name), n.op, [own(x) for x in n.inputs], n.shape, n.status, shift(n.relation),
                           n.source, n.code, own(n.of) if n.of else None) for n in g.nodes]
    return GraphView(g.label if rank < 0 else f"rank {rank}", nodes, [f"{o}_L{layers - 1}" for o in g.outputs])


def test_page_of_the_largest_gpt_dump_is_small_and_quick(gpt):
    report, views_seconds = gpt
    t = time.perf_counter()
    page = render_html(report)
    seconds = time.perf_counter() - t + views_seconds
    nodes = sum(len(g.nodes) for g in report.graphs)
    print(f"\n{nodes} nodes in {len(report.graphs)} graphs: {len(page) / 1e3:.0f} kB, "
          f"views {views_seconds:.2f} s + page {seconds - views_seconds:.2f} s")
    assert len(page.encode()) <= MAX_BYTES and seconds <= MAX_SECONDS
    data = page_data(page)
    assert [c["n"] for c in data["cols"]] == [len(g.nodes) for g in report.graphs]


def test_page_of_an_8_layer_tp8_program_is_small_and_quick(gpt, tmp_path):
    report, views_seconds = gpt
    seq, ranks = report.graphs[0], report.graphs[1:]
    report.graphs = [_layered(seq, 8, -1)] + [_layered(ranks[r % len(ranks)], 8, r) for r in range(8)]
    report.world_size = 8
    t = time.perf_counter()
    page = render_html(report)
    seconds = time.perf_counter() - t
    nodes = sum(len(g.nodes) for g in report.graphs)
    print(f"\n{nodes} nodes in {len(report.graphs)} graphs: {len(page) / 1e3:.0f} kB in {seconds:.2f} s "
          f"(+ {views_seconds:.2f} s views at one layer, TP 2)")
    assert len(page.encode()) <= MAX_BYTES and seconds <= MAX_SECONDS
    cols = page_data(page)["cols"]
    assert sum(len(c["ranks"]) for c in cols[1:]) == 8 and len(cols) <= 1 + len(ranks)  # identical ranks collapsed
    if shutil.which("chromium") or os.path.exists("/usr/bin/chromium"):  # and the browser draws it quickly
        (tmp_path / "big.html").write_text(page)
        done = _browse(tmp_path, (tmp_path / "big.html").as_uri(), "--dump-dom", "--window-size=1400,1000")
        check = json.loads(re.search(r'<pre id="selfcheck">([^<]*)</pre>', done.stdout).group(1))
        print(f"drawn in {check['ms']} ms: {check['nodes']} nodes in {check['graphs']} columns")
        assert check["graphs"] == len(cols) and check["overlaps"] == 0 and check["no_shape"] == 0
        assert check["ms"] < 2000
