"""The HTML report (``--html``): one self-contained page with the single-device graph beside
each rank's, nodes coloured by relation status, the first finding outlined and linked to its
source line; loaded in headless Chromium with no console errors (screenshot in tmp_path)."""
import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import ROOT
from shardproof.api import verify_dumps
from shardproof.cli import main

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def dump(params: str, body: str) -> str:
    lines = "".join(f"        {ln}\n" for ln in body.strip("\n").splitlines())
    return f"class GraphModule(torch.nn.Module):\n    def forward(self, {params}):\n{lines}"


def row_parallel(rows: int, cols: int, reduce: bool) -> str:
    """x @ w + b, on a rank holding columns of x and rows of w (with `reduce`, all-reduced)."""
    reduced = ("all_reduce: \"f32[4, 4]\" = torch.ops._c10d_functional.all_reduce.default(mm, 'sum', '0')\n"
               "wait_tensor: \"f32[4, 4]\" = torch.ops._c10d_functional.wait_tensor.default(all_reduce)\n"
               if reduce else "")
    return dump(f'x: "f32[4, {cols}]", w: "f32[{rows}, 4]", b: "f32[4]"', f'''
# File: model.py:3 in forward, code: h = x @ w
mm: "f32[4, 4]" = torch.ops.aten.mm.default(x, w)
{reduced}# File: model.py:4 in forward, code: y = h + b
add: "f32[4, 4]" = torch.ops.aten.add.Tensor({"wait_tensor" if reduce else "mm"}, b)
return (add,)''')


def page_data(page: str) -> dict:
    """The graph data a page embeds (its script draws the columns from it)."""
    return json.loads(re.search(r'<script type="application/json" id="graph-data">(.*?)</script>', page, re.S)
                      .group(1).replace("<\\/", "</"))


def column_nodes(data: dict, c: int) -> dict:
    """{node name: status} of column `c` of a page's graph data."""
    col, s = data["cols"][c], data["s"]
    return {s[n]: ("related", "violated", "unknown", "unreached", "unmatched")[st] for n, st in zip(col["name"], col["st"])}


def write(folder, files: dict) -> str:
    os.makedirs(folder, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return str(folder)


@pytest.fixture
def dumps(tmp_path):
    """(single-device dump, correct TP-2 dumps, TP-2 dumps missing the all_reduce, relations file)."""
    seq = write(tmp_path / "tp1", {"fw.g0.r0.py": row_parallel(8, 8, reduce=False)})
    good = write(tmp_path / "tp2", {f"fw.g0.r{r}.py": row_parallel(4, 4, reduce=True) for r in range(2)})
    bug = write(tmp_path / "tp2.bug", {f"fw.g0.r{r}.py": row_parallel(4, 4, reduce=False) for r in range(2)})
    rel = tmp_path / "rel.yaml"
    rel.write_text("inputs:\n  x: Shard(1)\n  w: Shard(0)\n  b: Replicate()\n")
    return seq, good, bug, str(rel)


def test_graph_views_give_every_node_its_relation(dumps):
    seq, good, bug, rel = dumps
    verified = verify_dumps(seq, good, rel, views=True)
    assert verified.status == "verified"
    assert [g.label for g in verified.graphs] == ["single-device", "rank 0", "rank 1"]
    assert {n.status for g in verified.graphs[1:] for n in g.nodes} == {"related"}
    mm = next(n for n in verified.graphs[1].nodes if n.name == "mm")
    assert mm.of == "mm" and 'Partial("sum") of mm' in mm.relation
    x = next(n for n in verified.graphs[2].nodes if n.name == "x")
    assert "x[:, 4:8]" in x.relation and "Shard(1) of x" in x.relation

    report = verify_dumps(seq, bug, rel, views=True)
    f = report.findings[0]
    assert (f.node, f.kind, f.counterpart) == ("add", "partial-sum-never-reduced", "add")
    for g in report.graphs[1:]:
        assert {n.name: n.status for n in g.nodes}["add"] == "violated"
    assert {n.name: n.status for n in report.graphs[0].nodes}["add"] == "violated"
    assert "graphs" not in report.to_json()  # the JSON contract stays as it was
    assert verify_dumps(seq, bug, rel).graphs == []  # views only when asked for


def test_html_is_self_contained_with_both_graphs_and_the_finding(dumps, tmp_path, capsys):
    seq, _, bug, rel = dumps
    out = tmp_path / "report.html"
    assert main(["verify", "--seq", seq, "--dist", bug, "--relations", rel, "--html", str(out)]) == 1
    assert f"HTML report: {out}" in capsys.readouterr().out
    page = out.read_text()
    data = page_data(page)
    assert [c["label"] for c in data["cols"]] == ["single-device", "rank 0", "rank 1"]
    for c in (1, 2):  # the finding's node, outlined on both ranks
        col = data["cols"][c]
        assert [data["s"][col["name"][i]] for i in col["fin"]] == ["add"] and column_nodes(data, c)["add"] == "violated"
    assert not re.search(r"<link|<img|\bsrc=|@import|url\(", page), "the page must fetch nothing"
    assert set(re.findall(r"https?://[^\s\"']+", page)) <= {"http://www.w3.org/2000/svg"}
    href = "file://" + os.path.abspath("model.py") + "#L4"
    assert f'<a href="{href}">model.py:4 in forward</a>' in page
    assert "partial-sum-never-reduced" in page and "insert all_reduce(sum)" in page


def test_html_of_a_case_file(tmp_path):
    pytest.importorskip("torch", reason="live capture needs the torch extra")
    out = tmp_path / "tp_mlp.html"
    assert main(["verify", os.path.join(ROOT, "src", "shardproof", "zoo", "tp_mlp.py"), "--html", str(out)]) == 0
    page = out.read_text()
    data = page_data(page)
    assert len(data["cols"]) == 3 and "VERIFIED" in page
    assert all("violated" not in column_nodes(data, c).values() for c in range(3))


def _chromium() -> str:
    path = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if path is None:
        pytest.skip("Debian chromium is absent and could not be installed (`make browser` installs it as root)")
    return path


def _browse(tmp_path, url: str, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile{len(list(tmp_path.glob('profile*')))}"
    cmd = [_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_html_loads_in_headless_chromium(dumps, tmp_path):
    seq, _, bug, rel = dumps
    out = tmp_path / "report.html"
    assert main(["verify", "--seq", seq, "--dist", bug, "--relations", rel, "--html", str(out)]) == 1
    url = out.as_uri() + "#finding"  # selects the finding's node, as a click would
    done = _browse(tmp_path, url, "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    console = [ln for ln in done.stderr.splitlines() if ":CONSOLE" in ln]
    assert console == [], console  # no console messages at all: no errors, no warnings
    dom = done.stdout
    assert 'data-ready="1"' in dom, "the page's script did not finish"
    assert re.search(r'<pre id="errors"></pre>', dom), "the page reported errors"
    check = json.loads(re.search(r'<pre id="selfcheck">([^<]*)</pre>', dom).group(1))
    assert check["graphs"] == 3 and check["finding"] == 2 and check["counts"]["violated"] == 3
    assert re.search(r'<h3>single-device \(\d+ nodes\)</h3>', dom) and "<h3>rank 1 (" in dom
    details = re.search(r'<div id="details" style="display: block;">(.*?)</div><pre id="selfcheck"', dom, re.S)
    assert details and "rank 0: add" in details.group(1) and "partial-sum-never-reduced" in details.group(1)
    assert len(re.findall(r'class="node [^"]*\bpeer\b', dom)) == 2  # rank 1's add and the single-device add

    shot = tmp_path / "report.png"
    done = _browse(tmp_path, url, f"--screenshot={shot}", "--window-size=1400,1000")
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
