"""Each traced node's storage layout (strides, storage offset) from a run of the graph on
``meta`` tensors: the meta kernels are what a fake-tensor run uses for a CPU tensor's
layout, without the fake mode's per-op Python dispatch (about 3x cheaper). The inputs keep
their strides, offsets and storage sizes; factory ops are moved to the meta device. None
when any node fails there: the caller then runs the fake-tensor propagation. (Where the two
differ, in the stride of a size-1 dimension of a view, the meta run gives eager's.)"""
from __future__ import annotations

import torch
from torch.fx import Interpreter

_META = torch.device("meta")


def _meta_like(value, storages: dict):
    """A meta tensor with `value`'s dtype, shape, strides, offset and storage size; inputs
    sharing a storage share the meta storage too (as a fake-tensor conversion keeps them)."""
    if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
        return value
    from torch._subclasses.fake_tensor import is_fake
    storage = value.untyped_storage()
    ptr = 0 if is_fake(value) else storage.data_ptr()
    key = (ptr, storage.nbytes(), value.dtype) if ptr else id(value)
    base = storages.get(key)
    if base is None:
        base = storages[key] = torch.empty(max(storage.nbytes() // value.element_size(), 1), dtype=value.dtype,
                                           device=_META)
    return base.as_strided(value.shape, value.stride(), value.storage_offset())


class _MetaRun(Interpreter):
    def __init__(self, gm, storages: dict):
        super().__init__(gm)
        self.layouts: dict = {}
        self._storages = storages

    def run_node(self, n):
        out = super().run_node(n)
        if isinstance(out, torch.Tensor):
            if out.device != _META:
                raise RuntimeError(f"{n.name} left the meta device")
            if out.layout == torch.strided:
                self.layouts[n] = (tuple(int(s) for s in out.stride()), int(out.storage_offset()))
        return out

    def call_function(self, target, args, kwargs):
        if "device" in kwargs:
            kwargs = {**kwargs, "device": _META}
        return target(*args, **kwargs)

    def get_attr(self, target, args, kwargs):
        return _meta_like(super().get_attr(target, args, kwargs), self._storages)


def meta_layouts(gm, args: list) -> dict | None:
    """fx node -> (strides, offset) for every strided tensor node of `gm` run on (meta
    copies of) `args`; None where a node cannot run on meta tensors."""
    storages: dict = {}
    run = _MetaRun(gm, storages)
    try:
        run.run(*[_meta_like(a, storages) for a in args])
    except Exception:  # noqa: BLE001  (the caller falls back to fake tensors)
        return None
    return run.layouts
