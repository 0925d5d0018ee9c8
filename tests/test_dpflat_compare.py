"""Issue 16, dp flat (session 26): a class member's node stands for another rank's only when
engine/classes.py ``_same_node`` says so. It now compares the two nodes field by field
(op, name, type, arguments with operands by name, keyword arguments, operand types)
without building either side's signature; these pin that every field still counts, and
that the comparison is at least as strict as the signature equality it replaces (an int
never stands for a float or a bool, a list never for a tuple)."""
import numpy as np
import pytest

from shardproof.engine.classes import _same_node
from shardproof.ir.graph import Node, TensorType


def _pair(**change):
    """Two graphs' worth of nodes: x, w (inputs) and y = mul(x, w, 2) on each side; `change`
    replaces fields of the second side's y."""
    def side(**kw):
        x = Node("x", "input", type=TensorType((4, 2)))
        w = Node("w", "input", type=TensorType((4, 2)))
        fields = {"name": "y", "op": "aten.mul", "args": (x, w, 2), "kwargs": {"alpha": 1}, "type": TensorType((4, 2))}
        fields.update({k: (v(x, w) if callable(v) else v) for k, v in kw.items()})
        return Node(**fields)
    return side(), side(**change)


def test_equal_nodes_of_two_ranks_compare_equal():
    a, b = _pair()
    assert a is not b and a.args[0] is not b.args[0]  # operands compared by name, not identity
    assert _same_node(a, b)
    a, b = _pair(type=TensorType((4, 2), strides=(1, 4), offset=8))  # a layout alone: the type's own equality
    assert _same_node(a, b) == (a.type == b.type)


@pytest.mark.parametrize("layout", [{"strides": (1, 4)}, {"offset": 8}, {"strides": (1, 4), "offset": 8}])
def test_an_operand_layout_counts_where_a_rule_reads_it(layout):
    """TensorType's equality leaves out strides and offset. The as_strided family's rules read
    its operand's (ops/strided.py): there a member whose operand lies otherwise in storage
    (a dp rank's batch slice at another offset) is not shared; elsewhere no rule reads it."""
    x2 = Node("x", "input", type=TensorType((4, 2), **{"strides": (2, 1), "offset": 0, **layout}))
    for op, shared in (("aten.as_strided", False), ("aten.as_strided_scatter", False), ("aten.mul", True)):
        a, b = _pair(op=op, args=lambda x, w: (x2, w, 2))
        a.op = op
        a.args = (Node("x", "input", type=TensorType((4, 2), strides=(2, 1), offset=0)),) + a.args[1:]
        assert a.args[0].type == b.args[0].type
        assert _same_node(a, b) is shared and _same_node(b, a) is shared, op


@pytest.mark.parametrize("change", [
    {"op": "aten.add"},
    {"name": "z"},
    {"type": TensorType((4, 2), "bf16")},
    {"args": lambda x, w: (x, w, 3)},             # another scalar (a rank-specific constant)
    {"args": lambda x, w: (x, w, 2.0)},           # an int is not a float
    {"args": lambda x, w: (x, w, True)},          # nor a bool
    {"args": lambda x, w: (w, x, 2)},             # operands swapped
    {"args": lambda x, w: (x, Node("v", "input", type=TensorType((4, 2))), 2)},  # another operand
    {"args": lambda x, w: [x, w, 2]},             # a list is not a tuple
    {"args": lambda x, w: (x, w)},                # an argument fewer
    {"args": lambda x, w: (x, Node("w", "input", type=TensorType((2, 4))), 2)},  # an operand of another type
    {"kwargs": {"alpha": 2}},
    {"kwargs": {"beta": 1}},
    {"kwargs": {}},
])
def test_any_differing_field_makes_nodes_differ(change):
    a, b = _pair(**change)
    assert not _same_node(a, b) and not _same_node(b, a)


def test_arguments_that_do_not_compare_are_not_shared():
    arr = np.arange(3)
    a, b = _pair(args=lambda x, w: (x, w, arr)), _pair(args=lambda x, w: (x, w, arr.copy()))
    assert not _same_node(a[1], b[1])  # an array's == is elementwise: no verdict, so not shared
