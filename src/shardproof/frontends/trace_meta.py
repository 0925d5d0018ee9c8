"""The per-node bookkeeping of a make_fx trace, cheaper (issue 16: capture cost per traced op).

What make_fx does per node beyond the op itself, and what a capture here does instead:

- node metadata: a real tensor's ``meta["val"]`` is a ``meta`` tensor (shape, dtype, strides:
  what ``from_fx`` reads), ``tensor_meta`` is left ``None`` (read by nothing here), and the
  value's storage layout (strides, offset) is recorded on the node (:data:`LAYOUT`) while the
  real value is at hand, so no second run of the graph on meta tensors is needed for it
  (:func:`traced_layouts`; where any node lacks one, the caller runs the graph on meta tensors
  as before);
- the source line: one user frame per node, its text formatted once per (file, line, function)
  (:func:`frame_text`) and parsed back once per distinct text (:func:`parse_source`);
- the traced module is a lazy ``GraphModule``: its Python code is generated when it is first
  called (derived graphs, the confirmation), not for every trace whose graph is only read.

``REFERENCE = True`` traces by the slow reference path (make_fx's own metadata, the meta run for
layouts, an eagerly compiled module, no caches): the tests compare the graphs of both.
"""
from __future__ import annotations

import contextlib
import functools
import os
import re
import traceback

import torch

from ..ir.graph import Source

REFERENCE = False
LAYOUT = "shardproof_layout"  # node.meta key: (strides, storage offset) of the traced value


@contextlib.contextmanager
def recorded_meta():
    """While tracing: a real tensor's node metadata is its meta tensor and its layout
    (module doc); anything else as make_fx records it."""
    from torch.fx.experimental import proxy_tensor
    if REFERENCE:
        yield
        return
    frame_text.cache_clear()  # a file edited between two traces: its lines read afresh, as before
    _cached_source.cache_clear()
    original = proxy_tensor.set_meta

    def set_meta(proxy, val):
        if type(val) is torch.Tensor and val.layout == torch.strided:
            meta = proxy.node.meta
            meta["val"] = torch.empty_strided(val.shape, val.stride(), dtype=val.dtype, device="meta")
            meta["tensor_meta"] = None
            meta[LAYOUT] = (tuple(val.stride()), val.storage_offset())
            return proxy
        return original(proxy, val)
    tracer = proxy_tensor.PythonKeyTracer
    create_arg = tracer.create_arg
    bypass = _plain_arguments()

    def plain_create_arg(self, a):
        handler = bypass.get(type(a))
        return handler(self, a) if handler is not None else create_arg(self, a)
    proxy_tensor.set_meta, tracer.create_arg = set_meta, plain_create_arg
    try:
        with torch.fx._lazy_graph_module._use_lazy_graph_module(True):
            yield
    finally:
        proxy_tensor.set_meta, tracer.create_arg = original, create_arg


def _plain_arguments() -> dict:
    """type -> torch.fx's own argument handler, for the exact types that make_fx's tracer
    (``PythonKeyTracer.create_arg``, then ``Tracer.create_arg``) passes on unchanged to
    ``TracerBase.create_arg``: its checks for parameters, modules, tensors, named tuples and
    opaque or proxyable objects are false for a proxy, a plain tuple, list or dict, a number,
    a string, None, a dtype, device, layout or memory format, or an operator (it runs them,
    about 20 us per argument, for every argument of every node)."""
    from torch.fx import proxy
    types = (proxy.Proxy, tuple, list, dict, int, float, bool, str, type(None), torch.dtype, torch.device,
             torch.layout, torch.memory_format, torch._ops.OpOverload)
    return {t: proxy._create_arg_bypass[t] for t in types}


def traced_layouts(gm) -> dict | None:
    """fx node -> (strides, offset) as recorded while tracing (:func:`recorded_meta`): the
    layout of each value as the traced program laid it out (the same kernels a meta run
    would use, run on the real values). None where a node with a tensor value has none."""
    if REFERENCE:
        return None
    out = {}
    for n in gm.graph.nodes:
        if n.op not in ("placeholder", "call_function"):
            continue
        if "val" not in n.meta:
            return None
        layout = n.meta.get(LAYOUT)
        if layout is not None:
            out[n] = layout
        elif isinstance(n.meta["val"], torch.Tensor):
            return None
    return out


@functools.lru_cache(maxsize=1 << 14)
def frame_text(filename: str, lineno: int, name: str) -> str:
    """``traceback.format_list`` of the one frame, as make_fx's recording would give it."""
    return "".join(traceback.format_list([traceback.FrameSummary(filename, lineno, name)]))


def uncached_frame_text(filename: str, lineno: int, name: str) -> str:
    return frame_text.__wrapped__(filename, lineno, name)


def frame_lines(filename: str, lineno: int, name: str) -> list[str]:
    return [(uncached_frame_text if REFERENCE else frame_text)(filename, lineno, name)]


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')


def _parse_source(trace: str, cwd: str) -> Source | None:
    m = _FRAME.findall(trace)
    if not m:
        return None
    file, line, fn, code = m[-1]
    rel = os.path.relpath(file, cwd)
    return Source(file if rel.startswith("..") else rel, int(line), fn, code.strip())


_cached_source = functools.lru_cache(maxsize=1 << 14)(_parse_source)


def parse_source(trace: str) -> Source | None:
    """The innermost frame of a recorded stack trace, its file relative to the working
    directory where it lies below it."""
    return (_parse_source if REFERENCE else _cached_source)(trace, os.getcwd())


def functional_trace(fn, decompositions: dict):
    """``make_fx`` of `fn` functionalized (``dispatch_functionalize``), recording stack
    traces (one user frame per node: torch_capture.user_stack_traces); without make_fx's
    torch-function mode, which notes every torch call on the tracer for ``meta["torch_fn"]``,
    written only by make_fx's module-stack tracer (not this one): one Python dispatch layer
    less per torch call, the graph unchanged."""
    from torch._subclasses.functional_tensor import FunctionalTensorMode, dispatch_functionalize
    from torch.fx.experimental.proxy_tensor import make_fx
    return make_fx(dispatch_functionalize(fn, FunctionalTensorMode()), decomposition_table=decompositions,
                   record_stack_traces=True, _disable_torch_fn_metadata_mode=not REFERENCE)
