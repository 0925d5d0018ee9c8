"""The HTML report at world size 8: ranks whose graphs are identical up to rank constants
share a column, a chosen rank can be shown beside the single device, every node carries its
shape and relation, a shape that differs from the single-device one is highlighted; and in
headless Chromium the page lays itself out with no overlap (its own self-check, written into
the DOM) and its screenshot shows the coloured nodes and the details panel."""
import json
import re
import struct
import zlib

import numpy as np
import pytest

from shardproof.api import verify_dumps
from shardproof.cli import main
from shardproof.engine.result import NodeView
from shardproof.report.html import render_html
from shardproof.report.html_data import rank_label, shape_check
from test_html_report import _browse, column_nodes, dump, page_data, write

WORLD, BAD_RANK = 8, 3
GROUP = "ranks 0–2, 4–7 (identical)"


def row_parallel_view(cols: int, rows: int, view: tuple, reduce: bool) -> str:
    """(x @ w [all-reduced] + b).view(...) on a rank holding `cols` columns of x and rows of w."""
    reduced = ("all_reduce: \"f32[4, 4]\" = torch.ops._c10d_functional.all_reduce.default(mm, 'sum', '0')\n"
               "wait_tensor: \"f32[4, 4]\" = torch.ops._c10d_functional.wait_tensor.default(all_reduce)\n"
               if reduce else "")
    a, b = view
    return dump(f'x: "f32[4, {cols}]", w: "f32[{rows}, 4]", b: "f32[4]"', f'''
# File: model.py:3 in forward, code: h = x @ w
mm: "f32[4, 4]" = torch.ops.aten.mm.default(x, w)
{reduced}# File: model.py:4 in forward, code: y = h + b
add: "f32[4, 4]" = torch.ops.aten.add.Tensor({"wait_tensor" if reduce else "mm"}, b)
# File: model.py:5 in forward, code: z = y.view(2, 8)
view: "f32[{a}, {b}]" = torch.ops.aten.view.default(add, [{a}, {b}])
return (view,)''')


@pytest.fixture
def world8(tmp_path):
    """(single-device dump, TP-8 dumps where rank 3 views its result as [8, 2], relations file)."""
    seq = write(tmp_path / "tp1", {"fw.g0.r0.py": row_parallel_view(8, 8, (2, 8), reduce=False)})
    bug = write(tmp_path / "tp8.bug", {f"fw.g0.r{r}.py": row_parallel_view(1, 1, (8, 2) if r == BAD_RANK else (2, 8),
                                                                           reduce=True) for r in range(WORLD)})
    rel = tmp_path / "rel.yaml"
    rel.write_text("inputs:\n  x: Shard(1)\n  w: Shard(0)\n  b: Replicate()\n")
    return seq, bug, str(rel)


def _page(world8, tmp_path) -> str:
    out = tmp_path / "report.html"
    seq, bug, rel = world8
    assert main(["verify", "--seq", seq, "--dist", bug, "--relations", rel, "--html", str(out)]) == 1
    return str(out)


def test_rank_labels():
    assert rank_label([3]) == "rank 3"
    assert rank_label(list(range(8))) == "ranks 0–7 (identical)"
    assert rank_label([0, 1, 2, 4, 5, 6, 7]) == GROUP
    assert rank_label([0, 1, 5]) == "ranks 0, 1, 5 (identical)"


def _node(shape: str, status: str, relation: str) -> NodeView:
    return NodeView("view", "aten.view", [], shape, status, relation)


def test_a_shape_is_flagged_only_where_no_relation_explains_it():
    seq = _node("f32[16, 6]", "violated", "")
    # the finding expected Shard(1), but the rank halved dim 0 (pytorch#179502's sharded view)
    assert shape_check(_node("f32[8, 6]", "violated", "the first finding: expected Shard(1) of sin"), seq) == 2
    assert shape_check(_node("f32[16, 3]", "violated", "the first finding: expected Shard(1) of sin"), seq) == 1
    assert shape_check(_node("f32[8, 6]", "violated", "the first finding: expected Replicate() of sin"), seq) == 2
    assert shape_check(_node("f32[16, 6]", "violated", "the first finding: expected Replicate() of sin"), seq) == 0
    # no relation: an even split of one dimension passes, anything else is flagged
    assert shape_check(_node("f32[4, 6]", "unknown", "related to no single-device tensor"), seq) == 1
    assert shape_check(_node("f32[12, 6]", "unknown", "related to no single-device tensor"), seq) == 2
    assert shape_check(_node("f32[96]", "unknown", "related to no single-device tensor"), seq) == 0  # another tensor
    # a proved relation maps the elements: whatever the shape, it is explained
    assert shape_check(_node("f32[2, 8, 6]", "related", 'Partial("sum") of view'), seq) == 1
    assert shape_check(_node("f32[8, 6]", "related", "holds x[0:8, :]"), None) == 0


def test_identical_ranks_share_a_column_and_the_odd_shape_is_flagged(world8, tmp_path):
    page = open(_page(world8, tmp_path)).read()
    data = page_data(page)
    s = data["s"]
    assert [c["label"] for c in data["cols"]] == ["single-device", GROUP, f"rank {BAD_RANK}"]
    seq, group, odd = data["cols"]
    assert group["ranks"] == [r for r in range(WORLD) if r != BAD_RANK] and odd["ranks"] == [BAD_RANK]
    names = [s[i] for i in group["name"]]
    # the rank constants live in one template per node, the numbers per rank beside it
    x = names.index("x")
    assert s[group["rel"][x]].startswith("holds x[:, \u0001]") and group["vary"][str(x)] == [
        str(r) for r in group["ranks"]]
    assert s[group["shape"][x]] == "f32[4, 1]" and group["sd"][x] == 1  # a shard of x: expected to differ
    # rank 3's view is [8, 2] where the single-device one is [2, 8]: flagged, against that view
    v = [s[i] for i in odd["name"]].index("view")
    assert s[odd["shape"][v]] == "f32[8, 2]" and odd["sd"][v] == 2 and s[seq["name"][odd["cmp"][v]]] == "view"
    assert group["sd"][names.index("view")] == 0 and column_nodes(data, 2)["view"] == "violated"
    assert '<select id="rank-choice">' in page and 'value="7">rank 7 beside the single device' in page


def _dom(tmp_path, url: str) -> tuple[str, dict]:
    done = _browse(tmp_path, url, "--dump-dom", "--window-size=1400,1000")
    assert done.returncode == 0, done.stderr[-2000:]
    assert [ln for ln in done.stderr.splitlines() if ":CONSOLE" in ln] == []
    dom = done.stdout
    assert 'data-ready="1"' in dom and '<pre id="errors"></pre>' in dom, "the page's script failed"
    return dom, json.loads(re.search(r'<pre id="selfcheck">([^<]*)</pre>', dom).group(1))


def png_pixels(path) -> np.ndarray:
    """The RGB pixels of an 8-bit, non-interlaced RGB(A) PNG (zlib and numpy; no PIL)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, head = 8, [], None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", data[pos + 8:pos + 8 + n])
        elif kind == b"IDAT":
            idat.append(data[pos + 8:pos + 8 + n])
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = head
    assert depth == 8 and ctype in (2, 6) and interlace == 0, head
    bpp = 3 if ctype == 2 else 4
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), np.uint8).reshape(h, 1 + w * bpp).astype(np.int32)
    out, prev = np.zeros((h, w * bpp), np.int32), np.zeros(w * bpp, np.int32)
    for y in range(h):
        f, line = raw[y, 0], raw[y, 1:]
        if f == 0:
            cur = line
        elif f == 1:
            cur = line.reshape(w, bpp).cumsum(0).reshape(-1) & 255
        elif f == 2:
            cur = (line + prev) & 255
        else:  # average and Paeth depend on the pixel just decoded: one at a time
            cur, up, row = [0] * (w * bpp), prev.tolist(), line.tolist()
            for x in range(w * bpp):
                a, b = (cur[x - bpp] if x >= bpp else 0), up[x]
                if f == 3:
                    cur[x] = (row[x] + ((a + b) >> 1)) & 255
                    continue
                c = up[x - bpp] if x >= bpp else 0
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                cur[x] = (row[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            cur = np.array(cur, np.int32)
        out[y], prev = cur, cur
    return out.reshape(h, w, bpp)[:, :, :3].astype(np.uint8)


def _count(px: np.ndarray, box: dict, colour: str) -> int:
    """Pixels of `colour` (#rrggbb) in the columns of `box` (a DOMRect-like dict in CSS px at
    ratio 1; only its x range: the screenshot may be scrolled otherwise than the DOM dump)."""
    region = px[:, max(0, int(box["x"])):int(box["x"] + box["w"])]
    rgb = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)], np.uint8)
    return int((region == rgb).all(-1).sum())


def test_world8_page_lays_out_without_overlap_in_chromium(world8, tmp_path):
    path = _page(world8, tmp_path)
    url = "file://" + path + "#finding"
    dom, check = _dom(tmp_path, url)
    assert check["labels"] == ["single-device", GROUP, f"rank {BAD_RANK}"]
    assert check["nodes"] == 6 + 8 + 8 and check["no_shape"] == 0  # a shape on every node
    assert check["overlaps"] == 0 and check["panel_covers_graphs"] == 0 and check["panel"]["w"] > 200
    assert check["mismatch"] == 1 and "f32[8, 2] vs f32[2, 8]" in dom
    assert check["graphs_box"]["x"] + check["graphs_box"]["w"] <= check["panel"]["x"]  # side by side
    assert check["dpr"] == 1
    # every node shows its relation, not only on hover
    assert check["no_relation"] == 0 and "holds x[:, 0] · Shard(1) of x" in dom

    shot = tmp_path / "report.png"
    done = _browse(tmp_path, url, f"--screenshot={shot}", "--window-size=1400,1000")
    assert done.returncode == 0, done.stderr[-2000:]
    px = png_pixels(shot)
    assert px.shape == (1000, 1400, 3) and len(np.unique(px.reshape(-1, 3), axis=0)) > 50, "a blank screenshot"
    graphs, panel = check["graphs_box"], check["panel"]
    assert _count(px, graphs, "#e3f4e8") > 20_000  # related nodes, drawn in the graph area
    assert _count(px, graphs, "#fde3e3") > 2_000  # the violated view on the ranks and single device
    assert _count(px, graphs, "#ffd0d0") > 200  # the highlighted shape of rank 3's view
    assert _count(px, panel, "#e3f4e8") == _count(px, panel, "#fde3e3") == 0, "nodes drawn under the panel"
    panel_px = px[:, int(panel["x"]):int(panel["x"] + panel["w"])]
    assert (panel_px.max(-1) < 100).sum() > 500, "the details panel shows no text"


def test_a_chosen_rank_is_shown_beside_the_single_device(world8, tmp_path):
    path = _page(world8, tmp_path)
    dom, check = _dom(tmp_path, "file://" + path + "#rank=5")
    assert check["labels"] == ["single-device", "rank 5 of ranks 0–2, 4–7"] and check["overlaps"] == 0
    assert "holds x[:, 5] · Shard(1) of x" in dom and "holds x[:, 0]" not in dom
    dom, check = _dom(tmp_path, "file://" + path + f"#rank={BAD_RANK}")
    assert check["labels"] == ["single-device", f"rank {BAD_RANK}"] and check["mismatch"] == 1


def test_world2_keeps_a_column_per_rank(world8, tmp_path):
    # below three ranks every rank has its own column, even when identical
    seq, _, rel = world8
    dist = write(tmp_path / "tp2", {f"fw.g0.r{r}.py": row_parallel_view(4, 4, (2, 8), reduce=True) for r in range(2)})
    report = verify_dumps(seq, dist, rel, views=True)
    assert [c["label"] for c in page_data(render_html(report))["cols"]] == ["single-device", "rank 0", "rank 1"]


def test_a_correct_tp8_program_is_one_column_with_no_shape_flagged(world8, tmp_path):
    seq, _, rel = world8
    good = write(tmp_path / "tp8", {f"fw.g0.r{r}.py": row_parallel_view(1, 1, (2, 8), reduce=True) for r in range(WORLD)})
    report = verify_dumps(seq, good, rel, views=True)
    assert report.status == "verified"
    data = page_data(render_html(report))
    assert [c["label"] for c in data["cols"]] == ["single-device", "ranks 0–7 (identical)"]
    assert 2 not in data["cols"][1]["sd"] and data["cols"][1]["sd"].count(1) == 2  # x and w: shards
