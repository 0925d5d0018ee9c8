"""Localization that lands on the cause: when the first broken tensor reads a reshape of a
related value that no single-device view matches (a view whose size arguments differ from
its single-device counterpart's beyond what the sharding explains), the view is to blame,
not the op that consumes it one step later. Pure functions over the relation status the
verifier computed; no I/O."""
from __future__ import annotations

import re
from math import prod
from typing import Optional

from ..ir.graph import Node

SIZED_VIEWS = {"aten.view", "aten._unsafe_view", "aten.reshape"}  # ops whose size arguments shape the result
LAYOUT_OPS = SIZED_VIEWS | {"aten.transpose", "aten.permute", "aten.t", "aten.expand", "aten.clone",
                            "aten.contiguous", "aten.unsqueeze", "aten.squeeze", "aten.alias"}


def _sizes(node: Node) -> Optional[list]:
    sizes = next((a for a in node.args[1:] if isinstance(a, (list, tuple))), None)
    return list(sizes) if sizes is not None else None


def _sharded_dim(rel, seq_shape) -> Optional[tuple[int, int]]:
    """(dim, pieces) when `rel` holds one contiguous share of one dim of its tensor."""
    if rel.positions is None:
        return None
    cut = [(d, p) for d, p in enumerate(rel.positions) if p is not None and len(p) < seq_shape[d]]
    if len(cut) != 1 or not len(cut[0][1]) or seq_shape[cut[0][0]] % len(cut[0][1]):
        return None
    d, p = cut[0]
    return d, seq_shape[d] // len(p)


def expected_local_sizes(seq_in_shape, seq_out_shape, rel) -> Optional[list]:
    """The sizes a rank's view must take for its share (`rel`) of the single-device view's
    input to become the same share of the single-device view's output: the output dim that
    starts where the sharded input dim starts, divided by the number of pieces."""
    cut = _sharded_dim(rel, seq_in_shape)
    if cut is None:
        return None
    dim, pieces = cut
    outer = prod(seq_in_shape[:dim])
    for j in range(len(seq_out_shape)):
        if prod(seq_out_shape[:j]) == outer and seq_out_shape[j] % pieces == 0:
            sizes = list(seq_out_shape)
            sizes[j] //= pieces
            return sizes
        if prod(seq_out_shape[:j]) > outer:
            break
    return None


def _seq_views_of(seq_env: dict, seq_in: Node) -> list[Node]:
    """The single-device sized views that read the same value as `seq_in` (views and copies
    of a tensor are the same value)."""
    want = getattr(seq_env.get(seq_in), "t", seq_in)
    return [s for s in seq_env if s.op in SIZED_VIEWS and isinstance(s.args[0], Node)
            and getattr(seq_env.get(s.args[0]), "t", s.args[0]) == want]


def misshaped_view(node: Node, operands: list[Node], status: dict, seq_env: dict):
    """The view to blame for `node`'s break, or None: following `node`'s operands back through
    layout ops that relate only as "a view of" a single-device value, the first sized view
    whose input holds (a share of) a single-device tensor exactly while its output matches no
    single-device view of it. Returns (view, single-device view or None, expected sizes or None)."""
    for x in operands:
        seen = 0
        while x is not None and x.op in LAYOUT_OPS and seen < 16:
            rel = status.get(x)
            if rel is None or rel.kind != "view":
                break
            src = next(iter(x.inputs), None)
            src_rel = status.get(src) if src is not None else None
            if x.op in SIZED_VIEWS and src_rel is not None and src_rel.kind == "held":
                return view_cause(x, src_rel, seq_env)
            x, seen = src, seen + 1
    return None


def view_cause(view: Node, src_rel, seq_env: dict):
    """(view, single-device view or None, expected sizes or None) when `view` (its input
    holding `src_rel`) is sized unlike the single-device view of the same value; None when
    its sizes are the ones the sharding requires."""
    seq_in = src_rel.seq_node
    candidates = _seq_views_of(seq_env, seq_in)
    same_rank = [s for s in candidates if len(s.shape) == len(view.shape)]
    counterpart = (same_rank or candidates or [None])[0]
    expected = None
    if counterpart is not None and seq_in.type is not None and not isinstance(seq_in.type, tuple):
        expected = expected_local_sizes(tuple(seq_in.shape), tuple(counterpart.shape), src_rel)
        if expected is not None and list(view.shape) == expected:
            return None  # sized as the sharding requires: the view is not the cause
    return view, counterpart, expected


def view_hint(view: Node, counterpart: Optional[Node], expected: Optional[list]) -> str:
    """The fix hint for a view sized unlike the single-device one."""
    if counterpart is not None and _sizes(counterpart) == _sizes(view):
        differ = (f"this view applies the single-device view's size arguments ({_sizes(view)}) to the rank's piece, "
                  f"giving shape {list(view.shape)}")
    else:
        differ = (f"the size arguments of this view ({_sizes(view)}) differ from the single-device view's"
                  + (f" ({_sizes(counterpart)})" if counterpart is not None else "") + " beyond the sharding")
    if expected is not None:
        return (f"{differ}: on each rank it must be shape {expected} -- compute the head count (or other split) "
                f"from the rank-local size (e.g. heads // world_size), keeping head_dim the single-device one")
    return (f"{differ}: no sizes make the view of the rank's piece a piece of the single-device view (a view of a "
            f"shard is not a shard of the view) -- gather (redistribute) the sharded dim before this view, or shard "
            f"a dim the view keeps")


def view_blame(view: Node, counterpart: Optional[Node], expected: Optional[list]):
    """(blame, (kind, expected, actual, hint), counterpart name) for a finding at a view whose
    sizes do not match the single-device view's."""
    theirs = f"single-device {counterpart.name} = {counterpart.op}(sizes {_sizes(counterpart)})" \
        if counterpart is not None else "no single-device view"
    blame = (f"its size arguments {_sizes(view)} (shape {list(view.shape)}) differ from {theirs}'s beyond the "
             f"sharding, so the rank's tensor is no piece of the single-device one")
    want = f"shape {expected}" if expected is not None else "a piece of the single-device view"
    expected_text = f"{want} of single-device {counterpart.name}" if counterpart is not None else want
    blamed_as = ("wrong-view-size", expected_text, f"shape {list(view.shape)}", view_hint(view, counterpart, expected))
    return blame, blamed_as, (counterpart.name if counterpart is not None else None)


def completes(collective: Node) -> bool:
    """Whether a reduction can complete a sum held in pieces across ranks: not one over a
    group of a single rank (a data-parallel group of size 1 reduces nothing)."""
    group = collective.args[-1] if collective.args and isinstance(collective.args[-1], tuple) else ()
    return len(group) != 1


def autograd_accumulation(node: Node) -> bool:
    """An add traced at the line that runs the backward (``autograd.grad(...)``,
    ``.backward()``): autograd summing the gradients of a tensor used more than once; it has no
    forward line of its own."""
    code = node.source.code if node.source is not None else ""
    return node.op == "aten.add" and bool(re.search(r"autograd\.grad\(|\.backward\(", code or ""))


def partial_origin(node: Node, status: dict) -> Optional[Node]:
    """The op where the partial sum `node` reads begins: back from its partial operand
    through partial tensors (views of it), to the first whose operands hold no partial sum."""
    def partial_input(n: Node) -> Optional[Node]:
        return next((x for x in n.inputs if status.get(x) is not None and status[x].kind == "partial"), None)
    x, seen = partial_input(node), 0
    while x is not None and seen < 64:
        up = partial_input(x)
        if up is None:
            return x
        x, seen = up, seen + 1
    return None


def gradient_accumulation_blame(origin: Node) -> tuple[str, str]:
    """(message prefix, hint) for a gradient summed whole with a partial one: the backward of
    the op at `origin` leaves each rank's share of the gradient of its input."""
    where = f" ({origin.source})" if origin.source else ""
    return (f"the gradient {origin.name} = {origin.op}(...) made in the backward of the forward line{where} is a "
            f"partial sum over the ranks, and autograd adds it, unreduced, to a gradient every rank holds whole",
            f"all_reduce(sum) this gradient over the tensor-parallel group in the backward: the operator through "
            f"which the replicated activation enters the tensor-parallel layers{where} (Megatron's f: identity "
            f"forward) must all_reduce the gradient of its input in its backward")
