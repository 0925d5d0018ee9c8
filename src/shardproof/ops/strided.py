"""as_strided and as_strided_scatter: views of their input's *storage*.

``as_strided(x, size, stride, offset)`` reads ``storage[offset + sum_k i_k * stride_k]``
(``offset`` defaults to x's own storage offset): it indexes the memory x lives in, not x's
elements in order. Where the graph records x's strides and storage offset (live capture),
every position read is mapped back to the element of x stored there, so the view is an
exact selection of x's elements whatever x's layout (a transposed view, an offset slice);
a read outside x's elements, or an input whose storage layout is not known, makes the rule
not apply (the op's check): the verdict is then unknown, never a guess.
"""
from __future__ import annotations

import numpy as np

from ..algebra import layout
from ..algebra.layout import Val, prod, shape_of
from ..ir.graph import contiguous_strides
from .common import as_float
from .registry import RuleCtx, declare


def _positions(size, stride, offset) -> np.ndarray:
    """The storage positions a strided view reads, laid out in its shape."""
    grids = np.meshgrid(*[np.arange(s) * st for s, st in zip(size, stride)], indexing="ij")
    return offset + sum(grids, np.zeros(tuple(size), dtype=np.int64)) if len(size) else np.asarray(offset)


def storage_layout(node) -> tuple | None:
    """(strides, storage offset) of the op's input, where the graph records them."""
    ty = getattr(node.args[0], "type", None)
    if getattr(ty, "strides", None) is None:
        return None
    return tuple(ty.strides), int(ty.offset or 0)


def element_index(shape, size, stride, offset, base_layout) -> tuple[np.ndarray | None, str | None]:
    """Row-major indices into the input (of `shape`) of the elements the view reads, or
    None and the reason they are not all elements of the input."""
    if base_layout is None:
        return None, "the storage layout (strides, offset) of its input is not known"
    bstrides, boff = base_layout
    start = boff if offset is None else int(offset)
    want = _positions(size, stride, start)
    stored = _positions(shape, bstrides, boff).ravel()  # where each element of the input lives
    order = np.argsort(stored, kind="stable")  # elements sharing a position (an expanded input) hold one value
    ranked = stored[order]
    at = np.clip(np.searchsorted(ranked, want), 0, max(len(ranked) - 1, 0))
    if not len(ranked) or not np.array_equal(ranked[at], want):
        return None, (f"it reads storage outside its input's elements (input strides {list(bstrides)}, "
                      f"offset {boff}; view size {list(size)}, stride {list(stride)}, offset {start})")
    return order[at], None


def _check(at: int):
    """The check of a strided op whose size, stride and offset arguments start at `at`:
    every position it reads or writes holds an element of its input."""
    def check(node) -> str | None:
        size, stride = node.args[at], node.args[at + 1]
        offset = node.args[at + 2] if len(node.args) > at + 2 else node.kwargs.get("storage_offset")
        return element_index(node.args[0].type.shape, size, stride, offset, storage_layout(node))[1]
    return check


def _index(ctx: RuleCtx, base: Val, size, stride, offset) -> np.ndarray:
    index, reason = element_index(shape_of(ctx.terms, base), size, stride, offset, storage_layout(ctx.node))
    if index is None:
        raise ValueError(reason)
    return index


def _window(index: np.ndarray) -> tuple[int, int] | None:
    flat = index.ravel()
    if len(flat) and np.array_equal(flat, np.arange(flat[0], flat[0] + len(flat))):
        return int(flat[0]), int(flat[0]) + len(flat)
    return None


def _as_strided_rule(ctx: RuleCtx, x: Val, size, stride, offset=None):
    """The selection of x's elements the view reads (a window of the flattened x where
    they are consecutive, the normal form of a view of a contiguous buffer)."""
    index = _index(ctx, x, size, stride, offset)
    win = _window(index)
    if win is None:  # any other pick: the term positions of those elements (a grid of a term x views, or a map)
        return _pick(ctx.terms, x.t, layout.flat_positions(ctx.terms, x).ravel()[index], tuple(size))
    flat = layout.reshape(ctx.terms, x, (prod(shape_of(ctx.terms, x)),))
    return layout.reshape(ctx.terms, layout.slice_(ctx.terms, flat, 0, *win), tuple(size))


def _pick(terms, t: int, m: np.ndarray, size: tuple) -> Val:
    """The elements at term positions `m` (laid out in `size`): a selection of the term
    where they form a grid in its dims, or a reshape of one (the view flattens a grid read
    in row-major order), else a position map."""
    direct = layout.at_positions(terms, t, m)
    if terms[direct.t].op != "take":
        return direct
    for level, level_m in layout.view_levels(terms, t, m):
        ts = terms.shape(level)
        counts = [len(np.unique(c)) for c in np.unravel_index(level_m.ravel(), ts)] if ts else []
        if ts and prod(counts) == m.size:
            inner = layout.at_positions(terms, level, level_m.reshape(counts))
            if terms[inner.t].op != "take":
                return layout.reshape(terms, inner, size)
    return direct


def _as_strided_scatter_rule(ctx: RuleCtx, base: Val, src: Val, size, stride, offset=None):
    from .aten import slice_scatter_rule
    win = _window(_index(ctx, base, size, stride, offset))
    if win is None:
        raise ValueError("as_strided_scatter into elements that are not consecutive has no rule")
    flat = layout.reshape(ctx.terms, base, (prod(shape_of(ctx.terms, base)),))
    src = layout.reshape(ctx.terms, src, (win[1] - win[0],))
    return layout.reshape(ctx.terms, slice_scatter_rule(ctx, flat, src, 0, *win), shape_of(ctx.terms, base))


def _num_index(x, size, stride, offset, base_layout):
    """Numerics: the elements read, from the recorded layout (without one, a contiguous
    input from its own start, as the dumps' functionalization bases are)."""
    x = np.asarray(x)
    base_layout = base_layout or (tuple(contiguous_strides(x.shape)), 0)
    index, reason = element_index(x.shape, size, stride, offset, base_layout)
    if index is None:
        raise ValueError(reason)
    return index


def _as_strided_num(x, size, stride, offset=None, base_layout=None):
    return np.ravel(x)[_num_index(x, size, stride, offset, base_layout)]


def _as_strided_scatter_num(base, src, size, stride, offset=None, base_layout=None):
    out = as_float(base).copy()
    out.reshape(-1)[_num_index(base, size, stride, offset, base_layout).ravel()] = np.ravel(src)
    return out


def _layout_kwargs(node) -> dict:
    return {"base_layout": storage_layout(node)}


declare("aten.as_strided", numerics=_as_strided_num, rule=_as_strided_rule, check=_check(1), node_kwargs=_layout_kwargs,
        doc="a strided view of its input's storage: the elements stored at the positions it reads")
declare("aten.as_strided_scatter", numerics=_as_strided_scatter_num, rule=_as_strided_scatter_rule, check=_check(2),
        node_kwargs=_layout_kwargs, doc="write through an as_strided view (consecutive elements of the input)")
