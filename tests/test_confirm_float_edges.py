"""The confirmation by execution (engine/confirm.py) where floats are not reals: infinities
and signed zeros, and the tolerance floor's scale. Each mended hole let a buggy adversarial
pair be verified (tests/adversarial/pairs: negzero_*, cancel_big_input; labelled on gloo)."""
import numpy as np

from shardproof.engine.confirm import closeness, finite_magnitude, input_scales
from shardproof.ir.graph import Graph, Node

INF = float("inf")


def test_an_infinity_is_matched_sign_and_all_never_a_scale():
    close = closeness(1e-3)
    want = np.array([-INF, 1.0, 2.0])
    assert close(want.copy(), want), "the same infinities where the single device has them"
    assert not close(np.array([INF, 1.0, 2.0]), want), "1/+0.0 is not 1/-0.0"
    assert not close(np.array([-INF, 1.5, 2.0]), want), "an infinity widens no finite element's tolerance"
    assert not close(np.array([3.0, 1.0, 2.0]), want), "a finite value where the single device is infinite"
    assert finite_magnitude(want) == 2.0 and finite_magnitude(np.array([INF])) == 0.0


def test_a_floor_scale_counts_only_the_inputs_an_output_is_computed_from():
    x, c = Node("x", "input"), Node("c", "input")
    neg = Node("neg", "aten.neg", (x,))
    add = Node("add", "aten.add", (neg, c))
    graph = Graph(nodes=[x, c, neg, add], outputs={"out": neg, "sum": add})
    scales = input_scales(graph, {"x": np.array([1.0, -3.0]), "c": np.array([5e7, -INF])})
    assert scales["neg"] == 3.0, "c is not an input of neg: its magnitude is no scale of it"
    assert scales["add"] == 5e7, "the largest finite magnitude of both inputs"


def test_a_value_set_input_the_graph_does_not_name_counts_for_every_output():
    x = Node("x", "input")
    neg = Node("neg", "aten.neg", (x,))
    scales = input_scales(Graph(nodes=[x, neg], outputs={"out": neg}), {"x": np.array([1.0]), "arg0": np.array([7.0])})
    assert scales["neg"] == 7.0
