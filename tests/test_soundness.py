"""Soundness: the proof rules never verify a wrong program. Each zoo model's captured
distributed graphs are mutated (a collective dropped, its reduce op changed, a scalar
constant or a slice offset changed on one rank); a mutant may be verified only if it is
genuinely equivalent, which the numeric evaluator must confirm on random inputs."""
import copy
import importlib

import pytest

pytest.importorskip("torch", reason="live capture needs the torch extra")

from shardproof.api import prepare  # noqa: E402
from shardproof.engine.verify import differing_outputs, verify_graphs  # noqa: E402
from shardproof.ir.graph import DistributedProgram, Node  # noqa: E402

MODELS = ["tp_mlp", "tp_attention", "gpt2_block", "llama_block", "sp_mlp", "vocab_parallel_embedding",
          "vocab_parallel_cross_entropy", "dtensor_mlp", "gqa_attention"]


def _mutants(dist: DistributedProgram):
    """(description, mutated program) pairs."""
    names = [n.name for n in dist.graphs[0].nodes]
    for name in names:
        node = dist.graphs[0].node(name)
        if node.op == "_c10d_functional.wait_tensor":
            yield f"drop the collective before {name}", _edit(dist, name, range(dist.world_size), _drop_collective)
        if node.op == "_c10d_functional.all_reduce":
            for op in ("max", "avg"):
                if node.args[1] != op:
                    yield f"{name} reduces with {op}", _edit(dist, name, range(dist.world_size),
                                                            lambda n, op=op: _set_arg(n, 1, op))
        if node.op != "constant" and any(isinstance(a, float) and a not in (0.0, float("-inf")) for a in node.args):
            yield f"scalar of {name} changed on rank 1", _edit(dist, name, [1], _scale_float)
        if node.op == "aten.slice" and len(node.args) >= 4 and isinstance(node.args[2], int):
            yield f"slice {name} shifted on rank 1", _edit(dist, name, [1], _shift_slice)


def _edit(dist, name, ranks, fn):
    mutant = copy.deepcopy(dist)
    for r in ranks:  # ranks' graphs may differ (rank-dependent code): no such node, no mutant
        if not mutant.graphs[r].has(name) or fn(mutant.graphs[r].node(name)) is False:
            return None
    return mutant


def _drop_collective(node: Node):
    collective = node.args[0]
    node.op, node.args, node.kwargs = "aten.clone", (collective.args[0],), {}


def _set_arg(node: Node, i: int, value):
    node.args = node.args[:i] + (value,) + node.args[i + 1:]


def _scale_float(node: Node):
    i = next((i for i, a in enumerate(node.args) if isinstance(a, float) and a not in (0.0, float("-inf"))), None)
    if i is None:
        return False
    _set_arg(node, i, node.args[i] * 1.5)


def _shift_slice(node: Node):
    src, dim, start, stop = node.args[:4]
    size = src.type.shape[dim]
    stop = min(stop, size)
    if stop + 1 > size:
        if start == 0:
            return False
        _set_arg(node, 2, start - 1)
        _set_arg(node, 3, stop - 1)
    else:
        _set_arg(node, 2, start + 1)
        _set_arg(node, 3, stop + 1)


@pytest.mark.parametrize("model", MODELS)
def test_mutants_never_verify_wrongly(model):
    p = prepare(importlib.import_module(model).case(2), 2)
    killed = equivalent = 0
    for what, mutant in _mutants(p.dist):
        if mutant is None:
            continue
        report = verify_graphs(p.seq, mutant, p.bindings, p.expect, examples=p.examples)
        if report.status == "verified":
            diff = set()
            for seed in (0, 1, 2):
                diff.update(differing_outputs(p.seq, mutant, p.bindings, p.expect, p.examples, seed=seed)[0])
            assert not diff, f"{model}: mutant '{what}' was verified but differs numerically: UNSOUND"
            equivalent += 1
        else:
            killed += report.status == "violation"
    assert killed > 0, f"{model}: no mutant was caught"
