"""Joint fw+bw Megatron dumps (Entangle's bug_missing_layernorm_allreduce, TP 1 vs TP 2 with
sequence parallelism): every op imports, and the per-node relations the engine computes
show the bug -- each rank's pre-MLP LayerNorm weight gradient is a *partial sum* over the
ranks of the single-device gradient, never all-reduced -- while the other gradients relate
as they should (sharded or replicated)."""
import os

import pytest

from shardproof.algebra.ranks import combine
from shardproof.algebra.terms import TermStore
from shardproof.engine.symbolic import interpret
from shardproof.engine.verify import Relater, _input_vals, verify_graphs
from shardproof.ir.graph import DistributedProgram
from shardproof.ops.registry import lookup
from shardproof.relations.infer import load_yaml, resolve_inputs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(ROOT, "..", "shared", "graphs", "entangle", "bug_missing_layernorm_allreduce")
YAML = {"both": os.path.join(ROOT, "examples", "dumps", "missing_layernorm_allreduce_both.yaml"),
        "bw": os.path.join(ROOT, "examples", "dumps", "missing_layernorm_allreduce.yaml")}

pytestmark = pytest.mark.skipif(not os.path.isdir(CASE),
                                reason=f"../shared/graphs absent: {os.path.normpath(CASE)} not found")


def _load(kind):
    from shardproof.frontends.fx_program import load_program
    relations = load_yaml(YAML[kind])
    seq = load_program(os.path.join(CASE, "tp1"), kind=kind, constants=relations.constants["seq"])[0]
    dist = DistributedProgram(load_program(os.path.join(CASE, "tp2.bug"), kind=kind,
                                           constants=relations.constants["dist"]))
    bindings = resolve_inputs({n.name: n.shape for n in seq.inputs},
                              [{n.name: n.shape for n in g.inputs} for g in dist.graphs],
                              relations.inputs, by_shape=True)
    return seq, dist, bindings


def _interpret(kind):
    seq, dist, bindings = _load(kind)
    terms = TermStore()
    seq_in, dist_in = _input_vals(terms, seq, dist, bindings)
    run = interpret(seq, dist, seq_in, dist_in, terms)
    return seq, dist, bindings, run, Relater(terms, seq, run.seq)


def _node(graph, name):
    return next(n for n in graph.nodes if n.name == name)


@pytest.fixture(scope="module")
def both():
    return _interpret("both")


@pytest.mark.parametrize("kind", ["both", "bw"])
def test_every_op_of_the_joint_and_backward_dumps_is_declared(kind):
    seq, dist, _ = _load(kind)
    unknown = {n.op for g in [seq, *dist.graphs] for n in g.nodes
               if n.op not in ("input", "constant") and lookup(n.op) is None}
    assert not unknown


def test_layernorm_weight_gradient_is_a_partial_sum_on_each_rank(both):
    seq, dist, _, run, relater = both
    assert not run.unsupported and run.mismatch is None
    want = run.seq[_node(seq, "getitem_58")]
    local = [run.dist[r][_node(g, "getitem_58")] for r, g in enumerate(dist.graphs)]
    # not replicated: each rank holds a different value, none of them the single-device one
    assert not local[0].same(local[1]) and all(v.t != want.t for v in local)
    # rank r's gradient is its own tokens' share: the ranks' values sum to the single-device gradient
    related = relater.partial(local)
    assert related is not None and related.kind == "partial" and related.partial == "sum"
    assert combine(run.terms, local, "sum").t == want.t
    # the bias gradient of the same LayerNorm: the same partial sum
    assert combine(run.terms, [run.dist[r][_node(g, "getitem_59")] for r, g in enumerate(dist.graphs)],
                   "sum").t == run.seq[_node(seq, "getitem_59")].t


def _holds(report, seq, name):
    out = next(k for k, n in seq.outputs.items() if n.name == name)
    return next(o.holds for o in report.outputs if o.name == out)


def test_other_gradients_relate_and_the_bug_is_not_verified():
    seq, dist, bindings = _load("both")
    report = verify_graphs(seq, dist, bindings, name="missing_layernorm_allreduce")
    expected = {
        "add_27": "Shard(0)",     # word embedding (vocab-parallel, masked lookup backward)
        "add_26": "Replicate()",  # position embedding
        "add_21": "Shard(0)",     # fused QKV weight
        "add_22": "Shard(0)",     # fused QKV bias
        "add_11": "Shard(0)",     # fc1 weight
        "add_10": "Shard(0)",     # fc1 bias
        "add_9": "Shard(1)",      # fc2 weight
    }
    assert {name: _holds(report, seq, name) for name in expected} == expected
    # tangents + a partial sum: no relation to the single-device weight gradient
    assert _holds(report, seq, "add_13") is None
    assert report.status != "verified"
    if report.status == "violation":
        assert report.findings


def test_backward_graph_relates_the_saved_vocab_parallel_masks():
    """The bw graph reads Megatron's rank-local masked targets and out-of-block masks as
    saved inputs; stated as LocalIds/OutsideBlock of the single-device ids, the
    cross-entropy gradient relates, and the LayerNorm weight gradient is a partial sum."""
    seq, dist, _, run, relater = _interpret("bw")
    g0 = dist.graphs[0]
    assert relater.direct(run.dist[0][_node(g0, "div")]) is not None  # softmax of the saved logits
    assert relater.direct(run.dist[0][_node(g0, "index_put_4")]) is not None  # softmax - onehot(targets)
    local = [run.dist[r][_node(g, "getitem_58")] for r, g in enumerate(dist.graphs)]
    assert relater.direct(local[0]) is None
    related = relater.partial(local)
    assert related is not None and related.partial == "sum" and related.seq_node.name == "getitem_58"


@pytest.mark.parametrize("kind", ["both", "bw"])
def test_missing_layernorm_allreduce_is_a_violation_at_the_unreduced_gradient(kind):
    """The acceptance case, end to end: the pre-MLP LayerNorm weight gradient (getitem_58,
    accumulated into add_13) must be equal on every rank; it is each rank's partial sum."""
    from shardproof.api import verify_dumps
    report = verify_dumps(os.path.join(CASE, "tp1"), os.path.join(CASE, "tp2.bug"), relations_file=YAML[kind],
                          auto_relations=True, expect={"add_13": "Replicate()"}, kind=kind)
    assert report.status == "violation"
    f = report.findings[0]
    assert (f.node, f.op, f.rank, f.kind) == ("add_13", "aten.add", [0, 1], "partial-sum-never-reduced")
    assert 'getitem_58: Partial("sum")' in f.message
    assert f.counterexample["single_device"] != f.counterexample["distributed"]
