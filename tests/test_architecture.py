"""Issue 15, "an engine you can read": the import graph of src/shardproof, read from the
source (ast, nothing imported), has no cycle between modules; the layers are imported one
way (frontends -> ir -> relations -> engine -> report, as DESIGN.md section 3 draws them:
ir imports no other layer, relations only ir, the engine never a frontend nor the report);
no source file is over 600 lines; ops/frameworks.py and ops/fsdp.py import no private
helper of ops/aten*.py."""
import ast
import os
import re
from collections import defaultdict

import pytest

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
PKG = "shardproof"
MAX_LINES = 600

# which layers a layer may import (itself always). ``case`` is the program description
# (shardproof/case.py, importing nothing); ``api`` the other top-level modules (the API, the CLI);
# algebra and ops are the relation algebra and the op registry that DESIGN.md puts under ir/.
# The frontends' execution modules (torch_exec, torch_rng, torch_chunks, torch_replay, rank_pool)
# use the engine's rng/lockstep/replay/executor; the engine never imports a frontend.
ALLOWED = {
    "case": set(),
    "ir": set(),
    "algebra": {"ir"},
    "ops": {"ir", "algebra"},
    "relations": {"ir", "algebra", "ops"},
    "engine": {"ir", "algebra", "ops", "relations"},
    "report": {"ir", "algebra", "ops", "relations", "engine"},
    "frontends": {"case", "ir", "algebra", "ops", "relations", "engine"},
    "api": {"case", "ir", "algebra", "ops", "relations", "engine", "report", "frontends"},
    "zoo": {"case", "ir", "algebra", "ops", "relations", "engine", "report", "frontends", "api"},
}

# Cycles that exist only through imports inside functions (a deferred import that breaks a
# module-level cycle). Not import cycles at load time, but still two-way dependencies: this
# list may only shrink (a test fails on a new one, or on a module joining one of these).
# ops.registry's load_builtin() importing every op module is plug-in registration, not a
# dependency, and is left out of the graph.
DEFERRED_CYCLES = [
    {"algebra.compute", "algebra.layout", "algebra.lemmas", "algebra.ranks"},  # layout.within_piece -> lemmas.linear
    {"frontends.torch_capture", "frontends.torch_collectives", "frontends.torch_events", "frontends.torch_p2p",
     "frontends.torch_pipelining", "frontends.torch_run", "frontends.torch_stage_shapes", "frontends.torch_train"},
    {"", "api", "cli", "frontends.rank_pool", "testing"},
]


def _modules() -> dict:
    mods = {}
    for folder, _, files in os.walk(os.path.join(SRC, PKG)):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                name = os.path.relpath(path, SRC)[:-3].replace(os.sep, ".")
                mods[name[: -len(".__init__")] if name.endswith(".__init__") else name] = path
    return mods


def _target(mods, module, path, node, alias) -> str | None:
    if isinstance(node, ast.Import):
        name = alias.name
    else:
        base = module.split(".") if path.endswith("__init__.py") else module.split(".")[:-1]
        prefix = ".".join(base[: len(base) - node.level + 1] + [node.module or ""]).strip(".") if node.level \
            else node.module
        name = f"{prefix}.{alias.name}" if f"{prefix}.{alias.name}" in mods else prefix
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name if name and name != module else None


def _imports(mods) -> tuple[dict, dict]:
    """module -> the modules it imports at load time, and those it imports inside functions
    (TYPE_CHECKING blocks left out)."""
    at_load, deferred = defaultdict(set), defaultdict(set)

    def walk(module, path, node, in_function, in_loader):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and getattr(child.test, "id", "") == "TYPE_CHECKING":
                continue
            func = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            loader = in_loader or (isinstance(child, ast.FunctionDef) and child.name == "load_builtin")
            if isinstance(child, (ast.Import, ast.ImportFrom)) and not loader:
                for alias in child.names:
                    t = _target(mods, module, path, child, alias)
                    if t:
                        (deferred if func else at_load)[module].add(t)
            walk(module, path, child, func, loader)
    for module, path in mods.items():
        with open(path, encoding="utf-8") as f:
            walk(module, path, ast.parse(f.read()), False, False)
    return at_load, deferred


def _cycles(graph: dict, nodes) -> list[set]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) >= 3:
        return parts[1]
    return "case" if module == f"{PKG}.case" else "api"


def _short(module: str) -> str:
    return module[len(PKG) + 1:] if module.startswith(PKG + ".") else ""


@pytest.fixture(scope="module")
def graph():
    mods = _modules()
    at_load, deferred = _imports(mods)
    both = {m: at_load.get(m, set()) | deferred.get(m, set()) for m in mods}
    return mods, at_load, both


def test_the_reader_sees_the_imports(graph):
    """The graph is read right: known edges, at load time and deferred."""
    mods, at_load, both = graph
    assert "shardproof.engine.diagnose" in at_load["shardproof.engine.verify"]
    assert "shardproof.ir.graph" in at_load["shardproof.engine.views"]
    assert "shardproof.ops.p2p" in both["shardproof.engine.lockstep"] - at_load["shardproof.engine.lockstep"]
    assert "shardproof.ops.aten" not in both["shardproof.ops.registry"]  # load_builtin: registration


def test_no_import_cycle_at_load_time(graph):
    mods, at_load, _ = graph
    assert _cycles(at_load, sorted(mods)) == []


def test_deferred_import_cycles_only_shrink(graph):
    mods, _, both = graph
    known = [{f"{PKG}.{m}" if m else PKG for m in c} for c in DEFERRED_CYCLES]
    found = _cycles(both, sorted(mods))
    new = [sorted(c) for c in found if not any(c <= k for k in known)]
    assert not new, f"a new import cycle (through imports inside functions): {new}"
    gone = [sorted(k) for k in known if not any(c <= k for c in found)]
    assert not gone, f"these cycles are gone: delete them from DEFERRED_CYCLES: {gone}"


def test_layers_are_imported_one_way(graph):
    mods, _, both = graph
    assert set(map(_layer, mods)) <= set(ALLOWED), set(map(_layer, mods)) - set(ALLOWED)
    wrong = sorted(f"{a} -> {b}" for a in mods for b in both[a]
                   if _layer(a) != _layer(b) and _layer(b) not in ALLOWED[_layer(a)])
    assert not wrong, wrong
    layers = {la: {lb for lb in ALLOWED[la]} for la in ALLOWED}
    assert _cycles(layers, sorted(layers)) == []  # the allowed table itself is one-way


def test_no_source_file_over_600_lines(graph):
    mods, _, _ = graph
    long = {}
    for path in mods.values():
        with open(path, encoding="utf-8") as f:
            n = sum(1 for _ in f)
        if n > MAX_LINES:
            long[os.path.relpath(path, SRC)] = n
    assert not long, f"split these files (over {MAX_LINES} lines): {long}"


@pytest.mark.parametrize("user", ["frameworks", "fsdp"])
def test_framework_ops_import_no_private_helper_of_aten(user):
    path = os.path.join(SRC, PKG, "ops", f"{user}.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    private = [(node.module, a.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and (node.module or "").startswith("aten") for a in node.names if a.name.startswith("_")]
    assert not private, private


def _engine_order() -> list[str]:
    """The engine's module order, as the docstring of engine/__init__.py writes it: numbered
    tiers ``N. what: module, module, ...`` (a tier may go on over the next lines)."""
    with open(os.path.join(SRC, PKG, "engine", "__init__.py"), encoding="utf-8") as f:
        doc = ast.get_docstring(ast.parse(f.read()))
    tiers, order = re.split(r"^\d+\. ", doc, flags=re.M)[1:], []
    for tier in tiers:
        order += [m.strip() for m in tier.partition(":")[2].replace("\n", " ").split(",") if m.strip()]
    return order


def test_engine_modules_follow_their_order(graph):
    """Issue 15: the engine's modules import each other one way (at load or inside a
    function), each only modules written before it in engine/__init__.py's order."""
    mods, _, both = graph
    order = _engine_order()
    prefix = f"{PKG}.engine."
    engine = {m[len(prefix):] for m in mods if m.startswith(prefix)}
    assert len(order) == len(set(order)), order
    assert set(order) == engine, f"place in engine/__init__.py's order: {sorted(engine - set(order))}; " \
                                 f"gone: {sorted(set(order) - engine)}"
    at = {m: i for i, m in enumerate(order)}
    late = sorted(f"{m} -> {t[len(prefix):]}" for m in order for t in both[prefix + m]
                  if t.startswith(prefix) and at[t[len(prefix):]] >= at[m])
    assert not late, f"engine modules importing a module not before them in the order: {late}"
