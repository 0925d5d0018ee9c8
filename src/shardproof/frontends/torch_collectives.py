"""``torch.distributed``'s in-place collectives routed to dataflow ops while tracing.

Collectives with a functional form become ``_c10d_functional`` ops; the rooted ones that
have none (``reduce``, ``scatter``, ``gather``) become ``shardproof_c10d`` ops declared here.
Roots are always *group* ranks in the graph (the c10d API's ``src``/``dst`` are global
ranks, ``group_src``/``group_dst`` group ranks). Buffers the backend does not handle
(``all_to_all_single`` reads and writes its buffers as if contiguous) are recorded on the
collective's node as a defect.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Callable

import torch
import torch.distributed as dist
from torch import Tensor

COLLECTIVE_PREFIXES = ("_c10d_functional.", "shardproof_c10d.")
DEFECTS_META = "shardproof_defects"  # key in an fx node's meta["custom"]: (kind, message, hint) triples


# ---------------------------------------------------------------- rooted collectives as ops

@torch.library.custom_op("shardproof_c10d::reduce", mutates_args=())
def _reduce_op(x: Tensor, op: str, dst: int, group: str) -> Tensor:
    """The reduction on group rank `dst`; on the others the buffer's value is backend-defined."""
    return x.clone()


@_reduce_op.register_fake
def _(x, op, dst, group):
    return torch.empty_like(x)


@torch.library.custom_op("shardproof_c10d::scatter", mutates_args=())
def _scatter_op(out: Tensor, pieces: list[Tensor], src: int, group: str) -> Tensor:
    """Group rank i receives piece i of group rank `src` (the others pass no pieces)."""
    return out.clone()


@_scatter_op.register_fake
def _(out, pieces, src, group):
    return torch.empty_like(out)


@torch.library.custom_op("shardproof_c10d::gather", mutates_args=())
def _gather_op(x: Tensor, n: int, dst: int, group: str) -> Tensor:
    """The group's tensors stacked ([n, *x.shape]) on group rank `dst`; undefined elsewhere."""
    return x.unsqueeze(0).expand(n, *x.shape).clone()


@_gather_op.register_fake
def _(x, n, dst, group):
    return x.new_empty((n, *x.shape))


# ---------------------------------------------------------------- helpers

_REDUCE_OPS = {"SUM": "sum", "AVG": "avg", "MAX": "max", "MIN": "min", "PRODUCT": "product"}


def _reduce_name(op) -> str:
    name = getattr(op, "name", None) or str(getattr(op, "op", op)).split(".")[-1]
    return _REDUCE_OPS.get(str(name).upper(), str(name).lower())


def _premultiplied(tensor, op):
    """(input, reduce op name): ``ReduceOp.PREMUL_SUM(f)`` (FSDP2's custom gradient divide
    factor) is a sum of the inputs multiplied by f."""
    if _reduce_name(op) == "premul_sum":
        return tensor * op.factor, "sum"
    return tensor, _reduce_name(op)


def _group_name(group) -> str:
    return (group or dist.group.WORLD).group_name


def group_root(group, rank: int | None, group_rank: int | None, default: int | None = None) -> int:
    """The root's rank in `group`, from the c10d API's global `rank` or `group_rank`."""
    if rank is None and group_rank is None and default is not None:
        return default
    from torch.distributed.distributed_c10d import _canonicalize_group_rank
    return _canonicalize_group_rank(group or dist.group.WORLD, rank, group_rank)


def _contiguity_defects(op: str, **buffers) -> list:
    """A (kind, message, hint) triple for each non-contiguous buffer (transposed, strided,
    expanded): gloo's ``all_to_all_single`` writes the output as if contiguous (scrambling
    it) and refuses such an input; NCCL refuses both."""
    out = []
    for role, t in buffers.items():
        if isinstance(t, Tensor) and not t.is_contiguous():
            out.append(("non-contiguous-buffer",
                        f"{op}'s {role} buffer is not contiguous (shape {list(t.shape)}, strides {list(t.stride())}):"
                        + (" gloo writes it as if contiguous (scrambling the result) and NCCL refuses it"
                           if role == "output" else " gloo and NCCL refuse it"),
                        f"pass a contiguous {role} (e.g. torch.empty(shape) rather than empty_like of a view, or "
                        f".contiguous()) and copy the result into the view afterwards"))
    return out


@contextlib.contextmanager
def _defects_on_nodes(defects: list):
    """Record `defects` on every node traced inside (the collective's node)."""
    if not defects:
        yield
        return
    from torch.fx import traceback as fx_traceback
    with fx_traceback.preserve_node_meta(), fx_traceback.annotate({DEFECTS_META: tuple(defects)}):
        yield


ASYNC_ISSUED = [0]
"""How many ``async_op=True`` collectives and P2P ops were traced (so far, in this process): a
rank that issued one gets its events recorded by an eager run (frontends/torch_events.py)."""


def _functional(result_of: Callable, name: str = "") -> Callable:
    """The collective traced; its issue (and, async, the handle whose ``wait()`` is recorded)
    is an event of the rank's program order (torch_p2p.record_collective)."""
    from .torch_p2p import record_collective
    fc = torch.ops._c10d_functional

    def wrap(*args, async_op: bool = False, **kwargs):
        ASYNC_ISSUED[0] += bool(async_op)
        work = record_collective(name, args[0] if args else None, kwargs.get("group"), async_op)
        result_of(fc, *args, **kwargs)
        return work
    return wrap


class _InPlaceCollective(torch.autograd.Function):
    """An in-place collective as eager autograd sees it: not at all. Eager PyTorch records
    no autograd node for ``c10d.allreduce_`` (nor ``broadcast_``), so the gradient passes
    through unchanged; frameworks that want a reduction in backward write a custom
    autograd function (Megatron's f/g operators), which is traced as written."""

    @staticmethod
    def forward(ctx, tensor, compute):
        return compute(tensor)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


# ---------------------------------------------------------------- the c10d API, traced

def _all_reduce(fc, tensor, op=dist.ReduceOp.SUM, group=None):
    reduce = lambda t: fc.wait_tensor(fc.all_reduce(*_premultiplied(t, op), _group_name(group)))  # noqa: E731
    tensor.copy_(_InPlaceCollective.apply(tensor, reduce))


def _all_gather_into_tensor(fc, output, input, group=None):
    """Also ``all_gather_single``; the output may be the concatenation or the stack of the inputs."""
    n = dist.get_world_size(group)
    output.copy_(fc.wait_tensor(fc.all_gather_into_tensor(input.contiguous(), n, _group_name(group))).view(output.shape))


def _all_gather(fc, tensor_list, tensor, group=None):
    n = dist.get_world_size(group)
    gathered = fc.wait_tensor(fc.all_gather_into_tensor(tensor.contiguous(), n, _group_name(group)))
    for i, piece in enumerate(gathered.chunk(n)):
        tensor_list[i].copy_(piece.view(tensor_list[i].shape))


def _reduce_scatter_tensor(fc, output, input, op=dist.ReduceOp.SUM, group=None):
    """Also ``reduce_scatter_single``; the input may be the concatenation or the stack of the outputs."""
    n = dist.get_world_size(group)
    input, reduce_op = _premultiplied(input.contiguous(), op)
    scattered = fc.reduce_scatter_tensor(input, reduce_op, n, _group_name(group))
    output.copy_(fc.wait_tensor(scattered).view(output.shape))


def _reduce_scatter(fc, output, input_list, op=dist.ReduceOp.SUM, group=None):
    """The list form: every input as large as the output (as c10d requires), stacked."""
    if any(t.shape != output.shape for t in input_list):
        raise ValueError("reduce_scatter: every input must have the output's shape")
    _reduce_scatter_tensor(fc, output.unsqueeze(0), torch.stack(list(input_list)), op, group)


def _split_sizes(splits, size: int, n: int) -> list[int]:
    if splits is None:  # c10d's default: even blocks of dim 0
        if size % n:
            raise ValueError(f"all_to_all_single: dim 0 ({size}) is not divisible by the group size {n}")
        return [size // n] * n
    splits = [int(s) for s in splits]
    if len(splits) != n or sum(splits) != size:
        raise ValueError(f"all_to_all_single: split sizes {splits} do not cut dim 0 ({size}) into {n} blocks")
    return splits


def _all_to_all_single(fc, output, input, output_split_sizes=None, input_split_sizes=None, group=None):
    n = dist.get_world_size(group)
    out_splits = _split_sizes(output_split_sizes, output.shape[0], n)
    in_splits = _split_sizes(input_split_sizes, input.shape[0], n)
    with _defects_on_nodes(_contiguity_defects("all_to_all_single", output=output, input=input)):
        out = fc.all_to_all_single(input.contiguous(), out_splits, in_splits, _group_name(group))
    output.copy_(fc.wait_tensor(out).view(output.shape))


def _all_to_all(fc, output_tensor_list, input_tensor_list, group=None):
    """The list form, as one ``all_to_all_single`` over the flattened pieces (piece sizes
    may differ per peer)."""
    flat_in = torch.cat([t.reshape(-1) for t in input_tensor_list])
    out = torch.empty(sum(t.numel() for t in output_tensor_list), dtype=flat_in.dtype)
    _all_to_all_single(fc, out, flat_in, [t.numel() for t in output_tensor_list],
                       [t.numel() for t in input_tensor_list], group)
    at = 0
    for t in output_tensor_list:
        t.copy_(out[at:at + t.numel()].view(t.shape))
        at += t.numel()


def _broadcast(fc, tensor, src=None, group=None, group_src=None):
    root = group_root(group, src, group_src)
    send = lambda t: fc.wait_tensor(fc.broadcast(t, root, _group_name(group)))  # noqa: E731
    tensor.copy_(_InPlaceCollective.apply(tensor, send))


def _reduce(fc, tensor, dst=None, op=dist.ReduceOp.SUM, group=None, group_dst=None):
    root = group_root(group, dst, group_dst)
    reduce = lambda t: torch.ops.shardproof_c10d.reduce(*_premultiplied(t, op), root, _group_name(group))  # noqa: E731
    tensor.copy_(_InPlaceCollective.apply(tensor, reduce))


def _scatter(fc, tensor, scatter_list=None, src=None, group=None, group_src=None):
    root = group_root(group, src, group_src, default=0)
    mine = dist.get_rank(group) == root
    if bool(scatter_list) != mine:
        raise ValueError("scatter: scatter_list must be given on the source rank and only there")
    pieces = [t.contiguous() for t in scatter_list] if mine else []
    tensor.copy_(torch.ops.shardproof_c10d.scatter(tensor, pieces, root, _group_name(group)))


def _gather(fc, tensor, gather_list=None, dst=None, group=None, group_dst=None):
    root = group_root(group, dst, group_dst, default=0)
    mine = dist.get_rank(group) == root
    if bool(gather_list) != mine:
        raise ValueError("gather: gather_list must be given on the destination rank and only there")
    stacked = torch.ops.shardproof_c10d.gather(tensor.contiguous(), dist.get_world_size(group), root,
                                               _group_name(group))
    for i, t in enumerate(gather_list or []):
        t.copy_(stacked[i])


_INPLACE = {
    "all_reduce": _all_reduce, "all_gather_into_tensor": _all_gather_into_tensor, "all_gather": _all_gather,
    "reduce_scatter_tensor": _reduce_scatter_tensor, "all_to_all_single": _all_to_all_single,
    "broadcast": _broadcast, "reduce": _reduce, "scatter": _scatter, "gather": _gather,
    "reduce_scatter": _reduce_scatter, "all_to_all": _all_to_all,
    "all_gather_single": _all_gather_into_tensor, "reduce_scatter_single": _reduce_scatter_tensor,  # FSDP2's
    "_all_gather_base": _all_gather_into_tensor, "_reduce_scatter_base": _reduce_scatter_tensor,  # older names
}
_LIBRARY_SKIP = ("torch", "shardproof")


def _library_aliases(saved: dict) -> list:
    """(module, name, routed name) for each module-level alias a library took of a collective at
    import (megatron-core: ``dist_reduce_scatter_func = torch.distributed.reduce_scatter_tensor``),
    which routing ``torch.distributed``'s attributes alone would miss."""
    originals = {id(fn): name for name, fn in saved.items()}
    found = []
    for mod_name, module in list(sys.modules.items()):
        if module is None or mod_name.split(".")[0] in _LIBRARY_SKIP:
            continue
        try:
            items = list(vars(module).items())
        except TypeError:
            continue
        found += [(module, attr, originals[id(value)]) for attr, value in items
                  if callable(value) and id(value) in originals]
    return found


@contextlib.contextmanager
def functional_collectives():
    """Route ``torch.distributed``'s in-place collectives to dataflow ops while tracing;
    ``make_fx`` would otherwise record them as opaque, mutating ``c10d`` ops."""
    from .torch_p2p import functional_p2p
    saved = {name: getattr(dist, name) for name in _INPLACE if hasattr(dist, name)}
    aliases = _library_aliases(saved)
    try:
        for name in saved:
            setattr(dist, name, _functional(_INPLACE[name], name))
        for module, attr, name in aliases:
            setattr(module, attr, getattr(dist, name))
        with functional_p2p():
            yield
    finally:
        for name, fn in saved.items():
            setattr(dist, name, fn)
        for module, attr, name in aliases:
            setattr(module, attr, saved[name])
