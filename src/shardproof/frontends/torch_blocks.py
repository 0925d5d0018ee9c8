"""One block of a layer stack as a program of its own, forward and backward (issue 16's
block contracts): ``BlockVJP(block)(x, g)`` returns the block's output ``y``, and the
vector-Jacobian product with the output gradient ``g``: ``grad_x`` and ``grad:<param>`` for
every parameter. Traced per rank like any live case, it is what a block contract is proved
on: the input relations of ``x`` and ``g`` in, the proved relations of ``y``, ``grad_x`` and
the parameter gradients out."""
from __future__ import annotations

import hashlib
from typing import Callable

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from ..case import Case

GRAD = "grad:"


class BlockVJP(nn.Module):
    """Forward and backward of `block` at the input `x` and output gradient `g`."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x, g):
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            params = dict(self.block.named_parameters())
            for p in params.values():
                if not p.requires_grad:  # a traced graph input in the parameter's place
                    p.requires_grad_(True)
            y = self.block(x)
            grads = torch.autograd.grad(y, [x, *params.values()], g, allow_unused=True)
        out = {"y": y.detach(), "grad_x": grads[0]}
        out.update({f"{GRAD}block.{n}": gr for n, gr in zip(params, grads[1:]) if gr is not None})
        return out


def block_case(single: nn.Module, parallel: Callable[[int, int], nn.Module], x: torch.Tensor, g: torch.Tensor,
               world: int, name: str, dist_inputs=None) -> Case:
    """The case of one block: `single` the single-device block, ``parallel(rank, world)``
    builds rank `rank`'s block from it (after shardproof redraws `single`'s weights). `x`
    and `g` enter as stated by the contract's input relations (the caller's ``relations``)."""
    return Case(single=BlockVJP(single), distributed=lambda rank, w: BlockVJP(parallel(rank, w)),
                inputs={"x": x, "g": g}, world_size=world, dist_inputs=dist_inputs, name=name,
                meta={"source": "block contract: one layer's forward and backward"})


_OPAQUE = [0]


def _members(name: str):
    """A collective's string argument: the global ranks of the group of that name (names
    follow creation order, so two programs could use one name for different groups), or
    None (not a group: a reduce op's name)."""
    from .torch_capture import group_ranks
    try:
        return group_ranks(name)
    except Exception:  # noqa: BLE001  (no group of that name)
        return None


def _constant_text(value: torch.Tensor) -> str:
    """A constant tensor's values as text (a hash), or a fresh opaque name where they are
    unknown (fake or meta tensors)."""
    from torch._subclasses.fake_tensor import is_fake
    if is_fake(value) or value.is_meta:
        _OPAQUE[0] += 1
        return f"=<unknown #{_OPAQUE[0]}>"
    from torch.utils._python_dispatch import _disable_current_modes
    with _disable_current_modes():  # a plain tensor read plainly (an active fake mode would refuse it)
        data = value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    return "=" + hashlib.sha256(data).hexdigest()[:16]


class _Recorder(TorchDispatchMode):
    """Every ATen op the program dispatches, as canonical text: tensors named by their graph
    input name or by the order they first appear, with shape, dtype, strides, storage
    offset; other arguments by value (collectives carry group names: strings, recorded with
    the group's members)."""

    def __init__(self, named: dict):
        super().__init__()
        self.ids = {id(t): name for name, t in named.items()}
        self.keep = list(named.values())  # alive while recording: ids stay unique
        self.rows: list[str] = []

    def _arg(self, value, made: bool = False):
        """`made`: an op's output. A tensor first seen as an argument, neither a named input
        nor an earlier output, was made outside the dispatcher (``torch.tensor(c)``): a
        constant, recorded with its values (a fake one's are unknown: never equal)."""
        if isinstance(value, torch.Tensor):
            key = id(value)
            if key not in self.ids:
                self.ids[key] = f"%{len(self.ids)}" + ("" if made else _constant_text(value))
                self.keep.append(value)
            return (self.ids[key], tuple(value.shape), str(value.dtype), tuple(value.stride()), value.storage_offset())
        if isinstance(value, (list, tuple)):
            return tuple(self._arg(v, made) for v in value)
        if isinstance(value, dict):
            return tuple(sorted((k, self._arg(v, made)) for k, v in value.items()))
        if isinstance(value, (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout,
                              torch.memory_format)):
            return repr(value)
        _OPAQUE[0] += 1  # an opaque object (a process group outside screening()): never equal to another
        return f"<{type(value).__name__} #{_OPAQUE[0]}>"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        groups = tuple(_members(v) for v in args if isinstance(v, str)) if "c10d" in str(func) else ()
        self.rows.append(repr((str(func), self._arg(args), self._arg(kwargs), self._arg(out, made=True), groups)))
        return out


def screening():
    """The context :func:`dispatch_text` runs in: collectives routed as during capture
    (entered once for many programs: routing them costs more than running a small block)."""
    from .torch_collectives import functional_collectives
    return functional_collectives()


def dispatch_text(program: nn.Module, data: dict) -> str:
    """Run `program` once on `data` (in the current process-group state, inside
    :func:`screening`) and return the ATen ops it dispatched, in order, as canonical text:
    what ``make_fx`` would record of it, before functionalization and decompositions (both
    deterministic functions of this op stream and its tensors' metadata)."""
    from .torch_capture import program_inputs
    named = program_inputs(program, data)
    if isinstance(program, nn.Module):  # the objects the program reads (program_inputs holds detached copies)
        named.update({f"{n}@": t for n, t in (*program.named_parameters(remove_duplicate=False),
                                               *program.named_buffers(remove_duplicate=False))})
    recorder = _Recorder(named)
    with recorder:
        program(**data)
    return "\n".join(recorder.rows)
