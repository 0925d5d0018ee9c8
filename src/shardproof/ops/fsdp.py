"""PyTorch FSDP2's custom ops (``torch.ops.fsdp``, as functionalized by ``auto_functionalized``:
output 0 is the op's return, then the new values of its mutated ``out`` arguments) and the
profiler markers FSDP2 wraps its phases in.

- ``all_gather_copy_in(inputs, output, sizes, numel, rank)``: this rank's flat shards
  concatenated (the all-gather input) and the output buffer with them written at the rank's
  slot (rank * numel).
- ``split_with_sizes_copy(gathered, sizes, dim, out=[...])``: the all-gather output
  (ranks x flat shards) split per parameter along `dim`, copied into ``out``.
- ``chunk_cat(tensors, dim, num_chunks, out)``: each gradient cut into `num_chunks` chunks
  along `dim` (the last zero-padded, as FSDP pads dim-0 shards), each chunk flattened,
  chunk i of every tensor concatenated into row i (the reduce-scatter input).
"""
from __future__ import annotations

import numpy as np

from ..algebra import layout
from ..algebra.layout import Val, prod, shape_of
from ..algebra.masks import make_fill
from .aten import slice_scatter_num, slice_scatter_rule, split_num, split_rule
from .common import as_float
from .registry import RuleCtx, declare

# ------------------------------------------------------------------ profiler markers

declare(("profiler._record_function_enter_new", "profiler._record_function_enter", "profiler._record_function_exit"),
        numerics=lambda *a, **k: None, rule=lambda ctx, *a, **k: None,
        doc="profiler range markers: no value (their handles flow only into each other)")

# ------------------------------------------------------------------ FSDP2


def _copy_in_num(inputs, output, sizes, numel, rank):
    region = np.concatenate([np.ravel(as_float(t)) for t in inputs])
    return region, slice_scatter_num(output, region, 0, numel * rank, numel * (rank + 1))


def _copy_in_rule(ctx: RuleCtx, inputs, output: Val, sizes, numel, rank):
    if any(len(t.vecs) != 1 for t in inputs):
        raise ValueError("all_gather_copy_in expects flat (1-d) inputs")
    region = layout.concat(ctx.terms, list(inputs), 0) if len(inputs) > 1 else inputs[0]
    return region, slice_scatter_rule(ctx, output, region, 0, numel * rank, numel * (rank + 1))


declare("fsdp.all_gather_copy_in", numerics=_copy_in_num, rule=_copy_in_rule,
        doc="FSDP2: flat shards concatenated into this rank's slot of the all-gather buffer")


def _check_outs(pieces_shapes, out_shapes):
    if [tuple(p) for p in pieces_shapes] != [tuple(o) for o in out_shapes]:
        raise ValueError(f"split pieces {pieces_shapes} do not fit the out tensors {out_shapes}")


def _split_copy_num(all_gather_output, all_gather_input_split_sizes, dim=0, out=()):
    pieces = split_num(as_float(all_gather_output), all_gather_input_split_sizes, dim)
    _check_outs([np.shape(p) for p in pieces], [np.shape(o) for o in out])
    return None, tuple(np.array(p) for p in pieces)


def _split_copy_rule(ctx: RuleCtx, all_gather_output: Val, all_gather_input_split_sizes, dim=0, out=()):
    pieces = split_rule(ctx, all_gather_output, all_gather_input_split_sizes, dim)
    _check_outs([shape_of(ctx.terms, p) for p in pieces], [shape_of(ctx.terms, o) for o in out])
    return None, tuple(pieces)


declare("fsdp.split_with_sizes_copy", numerics=_split_copy_num, rule=_split_copy_rule,
        doc="FSDP2: the all-gather output split per parameter (into out)")


def _padded_rows(n: int, chunks: int) -> int:
    return -(-n // chunks) * chunks


def _chunk_cat_num(tensors, dim, num_chunks, out=None):
    if dim != 0:
        raise ValueError("chunk_cat along a dim other than 0 has no rule")
    rows = []
    for t in tensors:
        t = as_float(t)
        pad = np.zeros((_padded_rows(t.shape[0], num_chunks) - t.shape[0],) + t.shape[1:])
        rows.append(np.concatenate([t, pad]).reshape(num_chunks, -1))
    return None, np.concatenate(rows, axis=1)


def _chunk_cat_rule(ctx: RuleCtx, tensors, dim, num_chunks, out=None):
    if dim != 0:
        raise ValueError("chunk_cat along a dim other than 0 has no rule")
    rows = []
    for t in tensors:
        shape = shape_of(ctx.terms, t)
        extra = _padded_rows(shape[0], num_chunks) - shape[0]
        if extra:  # zeros laid out like t on the other dims (a constant holds on any piece)
            zshape = (extra,) + tuple(ctx.terms.shape(t.t)[1:])
            zeros = Val(make_fill(ctx.terms, 0, zshape), (None,) + tuple(t.vecs[1:]))
            t = layout.concat(ctx.terms, [t, zeros], 0)
        rows.append(layout.reshape(ctx.terms, t, (num_chunks, prod(shape) // shape[0] * (shape[0] + extra) // num_chunks)))
    return None, layout.concat(ctx.terms, rows, 1) if len(rows) > 1 else rows[0]


declare("fsdp.chunk_cat", numerics=_chunk_cat_num, rule=_chunk_cat_rule,
        doc="FSDP2: gradients chunked (zero-padded) per rank and concatenated (the reduce-scatter input)")
