"""Issue 18's acceptance map (docs/acceptance/issue18.md) held to the code: every test function it
names exists (make test), and every test id is collected with the marker it states (make test,
slow or sweep; pytest's own collection, in the sweep); every zoo file it names
exists; the catalogue table states each bug file's class, ranks, stage and microbatch as the
file's ``meta`` does, names an existing correct twin, and lists every pipeline, CP and
temporal bug of the zoo; ``make bench`` runs the pipeline configuration beside VERDICT's plan
shapes. (A test renamed, re-marked or dropped, or a bug's location changed, fails here.)"""
import ast
import importlib
import os
import re

import pytest

from conftest import ROOT, ZOO

DOC = os.path.join(ROOT, "docs", "acceptance", "issue18.md")
TEXT = open(DOC, encoding="utf-8").read()
REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)(\[[^`]*\])?`")
MARK = re.compile(r"\((make test|slow|sweep)[,)]")
ZOO_REF = re.compile(r"`((?:train|cp)/(?:bugs/)?\w+)`")


def _references():
    """(file, function, params or None, marker or None) of each test id, per line: a marker in
    parentheses applies to the ids before it on its line since the previous marker."""
    out = []
    for line in TEXT.splitlines():
        pending = []
        for m in sorted([*REF.finditer(line), *MARK.finditer(line)], key=lambda m: m.start()):
            if m.re is REF:
                pending.append((m.group(1), m.group(2), m.group(3)[1:-1] if m.group(3) else None))
            else:
                out += [(*ref, m.group(1)) for ref in pending]
                pending = []
        out += [(*ref, None) for ref in pending]
    return out


REFS = _references()


class _Collector:
    def __init__(self):
        self.items = {}

    def pytest_collection_modifyitems(self, items):
        for item in items:
            marks = {m.name for m in item.iter_markers()}
            self.items[item.nodeid] = "sweep" if "sweep" in marks else "slow" if "slow" in marks else "make test"


@pytest.fixture(scope="module")
def collected():
    """Every item of the files the map names, with its marker (pytest's own collection)."""
    files = sorted({os.path.join(ROOT, f) for f, *_ in REFS})
    collector = _Collector()
    rc = pytest.main(["--collect-only", "-qq", "-p", "no:cacheprovider", "-m", "", "--rootdir", ROOT, *files],
                     plugins=[collector])
    assert rc == 0, rc
    return {nodeid.split("tests/", 1)[-1]: mark for nodeid, mark in collector.items.items()}


def test_every_named_test_function_exists():
    """The cheap half (make test): each named function is defined at the top of its file."""
    defined = {}
    for path in {f for f, *_ in REFS}:
        tree = ast.parse(open(os.path.join(ROOT, path), encoding="utf-8").read())
        defined[path] = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert [f"{p}::{n}" for p, n, *_ in REFS if n not in defined[p]] == []


@pytest.mark.sweep  # pytest's collection of the 14 files named: ~50 s under load beside the suite
def test_every_named_test_is_collected_with_its_marker(collected):
    assert len(REFS) > 100
    wrong = []
    for path, name, params, marker in REFS:
        base = f"{path[len('tests/'):]}::{name}"
        ids = [base + f"[{params}]"] if params else [i for i in collected if i == base or i.startswith(base + "[")]
        found = [i for i in ids if i in collected]
        if not found:
            wrong.append(f"{base}[{params}] not collected" if params else f"{base} not collected")
        elif marker and any(collected[i] != marker for i in found):
            wrong.append(f"{found}: {[collected[i] for i in found]}, the map says {marker}")
    assert not wrong, "\n".join(wrong)


def test_named_zoo_files_exist():
    names = set(ZOO_REF.findall(TEXT))
    assert len(names) > 30
    assert [n for n in names if not os.path.exists(os.path.join(ZOO, n + ".py"))] == []


def _catalogue_rows():
    start = TEXT.index("| # | bug")
    rows = []
    for line in TEXT[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split(" | ")])
    return rows


def _issue18_bug_files():
    """The pipeline, CP and temporal bug files of the zoo: every CP bug, and every training bug
    that runs a pipeline schedule or receives into a saved buffer."""
    out = {f"cp/bugs/{f[:-3]}" for f in os.listdir(os.path.join(ZOO, "cp", "bugs")) if f.endswith(".py")}
    folder = os.path.join(ZOO, "train", "bugs")
    for f in os.listdir(folder):
        src = open(os.path.join(folder, f), encoding="utf-8").read() if f.endswith(".py") else ""
        if re.search(r"PipelineTraining|pipeline_case|pp_cp_case|fourd_case", src) or f.startswith("recv_"):
            out.add(f"train/bugs/{f[:-3]}")
    return out


def test_catalogue_rows_match_each_bug_files_meta():
    rows = _catalogue_rows()
    assert len(rows) >= 8 and [int(r[0]) for r in rows] == list(range(1, len(rows) + 1))
    listed = set()
    for number, bug, source, kind, ranks, position, located, twin, verified in rows:
        assert "tests/" in located and ("tests/" in verified or verified.startswith("the same test")), number
        twins = ZOO_REF.findall(twin)
        assert twins or "bug=False" in twin or "case(" in twin or "buffer" in twin or "Pipeline" in twin, (number, twin)
        name = ZOO_REF.findall(bug)
        if not name or "/bugs/" not in name[0]:
            continue  # a test program (tests/temporal_*.py, a subclass in a test): its test asserts it
        listed.add(name[0])
        module = importlib.import_module(os.path.basename(name[0]))
        world = module.WORLD_SIZES[0]
        meta = module.case(world).meta
        assert meta["bug"] == kind, (number, meta["bug"], kind)
        if ranks.startswith("["):
            assert meta["bug_ranks"] == ast.literal_eval(ranks.split(" (")[0]), (number, meta["bug_ranks"])
        elif ranks == "all":
            assert meta["bug_ranks"] == "all", number
        if position == "-":
            assert "bug_stage" not in meta, number
        else:
            stage, microbatch = (p.strip() for p in position.split("/"))
            assert meta["bug_stage"] == int(stage), (number, meta["bug_stage"])
            if microbatch.isdigit():
                assert meta["bug_microbatch"] == int(microbatch), (number, meta["bug_microbatch"])
            else:
                assert meta["bug_microbatch"] is None and meta.get("bug_point") == microbatch, number
    assert sorted(_issue18_bug_files() - listed) == []
    assert sum(1 for r in rows if "http" in r[2] or "VERDICT" in r[2] or "Megatron" in r[2]
               or "DeepSpeed" in r[2] or "torch" in r[2]) >= 8  # from real frameworks or their trackers


def test_bench_pipeline_is_in_make_bench():
    """``make bench`` runs bench/pipeline.py, whose rows are the dp2 x pp2 x tp2 Llama step at toy
    shapes and at VERDICT's Llama-3-8B block shapes beside VERDICT's 2-layer plan."""
    makefile = open(os.path.join(ROOT, "Makefile"), encoding="utf-8").read()
    bench = makefile.split("\nbench:", 1)[1].split("\n\n", 1)[0]
    assert "bench/pipeline.py" in bench
    src = open(os.path.join(ROOT, "bench", "pipeline.py"), encoding="utf-8").read()
    assert "hidden=4096, heads=32, kv_heads=8, ffn=14336" in src and "dp2 x pp2 x tp2" in src
    assert "VERDICT" in src and "pipeline_llama_3d" in src
