"""Live capture of PyTorch programs into the Graph IR (needs the ``torch`` extra).

Each rank is traced in this one process under PyTorch's fake process group, re-initialised
per rank, with ``make_fx`` over a functionalized call: parameters, buffers and data are
graph inputs, in-place and async ``torch.distributed`` collectives are routed to their
``_c10d_functional`` forms (so they appear as ordinary dataflow, in program order), and
each node keeps the user's source line (innermost frame outside torch and shardproof).
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import sysconfig
import traceback
from dataclasses import replace
from typing import Any, Callable

import torch
import torch.distributed as dist

from ..ir.graph import Graph, Node, Source, TensorType
from .torch_collectives import ASYNC_ISSUED, COLLECTIVE_PREFIXES, DEFECTS_META, functional_collectives
from .torch_p2p import attach_events, recording as p2p_recording
from .torch_libraries import library_tracing
from .torch_decomp import capture_decompositions
from .torch_placements import placement_specs, stated_relations
from .trace_meta import frame_lines, functional_trace, parse_source, recorded_meta, traced_layouts

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ZOO_DIR = os.path.join(_PKG_DIR, "zoo")  # the bundled case files are user code
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
_STDLIB_DIRS = tuple(os.path.abspath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib"))
DTYPES = {
    torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
    torch.bool: "b8", torch.complex64: "c64", torch.complex128: "c128",
}
_DROPPED_KWARGS = {"device", "layout", "pin_memory", "memory_format", "non_blocking"}
# callables (label, fx_graph, input_names, output_names) shown every graph traced, before its
# conversion (examples/huggingface/make_corpus.py writes them out as readable FX dumps)
FX_SINKS: list = []


class CaptureError(Exception):
    """The program could not be traced (raised with the user's own error as the cause)."""


# ---------------------------------------------------------------- process groups

@contextlib.contextmanager
def fake_world(rank: int, world_size: int):
    """A fake process group for one rank: collectives record, nothing communicates."""
    from torch.testing._internal.distributed.fake_pg import FakeStore
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    _clear_dtensor_caches()
    try:
        with local_dtensor_sharding():
            yield
    finally:
        _clear_dtensor_caches()
        dist.destroy_process_group()


@contextlib.contextmanager
def local_dtensor_sharding():
    """Make DTensor shard weights locally (``src_data_rank=None``) while building a rank's
    program. By default rank 0 scatters the shards, which the fake process group does not
    do (every other rank would hold uninitialised memory); every rank here holds the full
    weights, so cutting its own shard gives exactly what the scatter would deliver."""
    try:
        from torch.distributed.tensor import _api
        from torch.distributed.tensor.parallel import api
    except ImportError:
        yield
        return
    fns = [f for f in (_api.distribute_tensor, api.parallelize_module)
           if (f.__kwdefaults__ or {}).get("src_data_rank", None) is not None]
    saved = [dict(f.__kwdefaults__) for f in fns]
    try:
        for f in fns:
            f.__kwdefaults__["src_data_rank"] = None
        yield
    finally:
        for f, kw in zip(fns, saved):
            f.__kwdefaults__.update(kw)


def _clear_dtensor_caches() -> None:
    """DTensor caches sharding plans by mesh, whose hash ignores the rank: without this,
    rank 1 silently reuses rank 0's plan."""
    with contextlib.suppress(Exception):
        torch._C._clear_DTensor_sharding_propagator_cache()
    with contextlib.suppress(Exception):
        from torch.distributed.tensor import DTensor
        prop = DTensor._op_dispatcher.sharding_propagator
        for attr in ("propagate_op_sharding",):
            fn = getattr(prop, attr, None)
            if hasattr(fn, "cache_clear"):
                fn.cache_clear()


def group_ranks(group_name: str) -> tuple[int, ...]:
    """Global ranks of a process group known by name (for collective nodes)."""
    from torch.distributed.distributed_c10d import _resolve_process_group
    return tuple(dist.get_process_group_ranks(_resolve_process_group(group_name)))


# ---------------------------------------------------------------- source locations

@functools.lru_cache(maxsize=None)
def _is_user_file(filename: str) -> bool:
    """Not torch, not shardproof (its bundled zoo cases are user code), not the stdlib
    (its glue: contextlib, and a worker process's concurrent.futures and multiprocessing)."""
    f = os.path.abspath(filename)
    ours = f.startswith(_PKG_DIR) and not f.startswith(_ZOO_DIR)
    stdlib = f.startswith(_STDLIB_DIRS) and "-packages" + os.sep not in f
    return not (f.startswith(_TORCH_DIR) or ours or stdlib or "/contextlib.py" in f or filename.startswith("<"))


def _user_frame(summary) -> traceback.FrameSummary | None:
    return next((frame for frame in reversed(summary) if _is_user_file(frame.filename)), None)


def innermost_user_frame() -> traceback.FrameSummary | None:
    """The caller's innermost user frame, without formatting the whole stack."""
    f = sys._getframe(1)
    while f is not None and not _is_user_file(f.f_code.co_filename):
        f = f.f_back
    return None if f is None else traceback.FrameSummary(f.f_code.co_filename, f.f_lineno, f.f_code.co_name)


@contextlib.contextmanager
def user_stack_traces():
    """Keep the user's innermost frame on every traced node, cheaply: make_fx's own
    recording symbolizes the whole stack for every node (and its filter keeps only frames
    named ``forward``, which loses plain functions and helper calls); here each node gets
    the one frame, found by walking the live frames (see :func:`innermost_user_frame`).
    Also one fake mode for the whole trace (:func:`one_fake_mode`)."""
    from torch.fx.proxy import TracerBase
    original = TracerBase.create_node

    def create_node(self, *args, **kwargs):
        record, self.record_stack_traces = self.record_stack_traces, False
        try:
            node = original(self, *args, **kwargs)
        finally:
            self.record_stack_traces = record
        if record and not node.stack_trace:
            frame = innermost_user_frame()
            if frame is not None:
                node.stack_trace = "".join(frame_lines(frame.filename, frame.lineno, frame.name)).strip()
        return node
    TracerBase.create_node = create_node
    try:
        with one_fake_mode():
            yield
    finally:
        TracerBase.create_node = original


@contextlib.contextmanager
def one_fake_mode():
    """A real-mode make_fx records each op's output metadata as a fake tensor, in a fake
    mode it looks up (``detect_fake_mode``) or, finding none, makes anew for every op (a
    ``FakeTensorMode`` records the whole stack when made). A tracing context holding one
    mode makes the lookup find it; a real tensor's metadata is recorded as a meta tensor
    (shape, dtype, strides: what :func:`from_fx` reads) and ``tensor_meta`` not at all."""
    from torch._guards import TracingContext, tracing
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental import proxy_tensor
    original = proxy_tensor.extract_val

    def extract_val(val, include_real=False):
        if type(val) is torch.Tensor and val.layout == torch.strided:  # a real tensor: its metadata only
            return torch.empty_strided(val.shape, val.stride(), dtype=val.dtype, device="meta")
        return original(val, include_real)
    proxy_tensor.extract_val = extract_val
    metadata = proxy_tensor._extract_tensor_metadata  # node.meta["tensor_meta"]: read by nothing here
    proxy_tensor._extract_tensor_metadata = _no_metadata
    try:
        if TracingContext.try_get() is not None:
            with recorded_meta():
                yield
        else:
            with tracing(TracingContext(FakeTensorMode(allow_fallback_kernels=True, allow_non_fake_inputs=True))), \
                    recorded_meta():
                yield
    finally:
        proxy_tensor.extract_val = original
        proxy_tensor._extract_tensor_metadata = metadata


def _no_metadata(val, include_contiguity=True):
    return None


def failure_site(exc: BaseException) -> str:
    """' at file:line (function): `code`' for the innermost user frame (not torch, not
    shardproof) of a failed trace; '' when there is none."""
    frame = _user_frame(traceback.extract_tb(exc.__traceback__))
    if frame is None:
        return ""
    rel = os.path.relpath(frame.filename)
    where = frame.filename if rel.startswith("..") else rel
    return f" at {where}:{frame.lineno} ({frame.name}): `{(frame.line or '').strip()}`"


_DATA_DEPENDENT = "data-dependent control flow"


def trace_failure(what: str, exc: BaseException) -> CaptureError:
    """The error for a failed trace: what failed, where in the user's code, why."""
    return CaptureError(f"{what} failed{failure_site(exc)}: {type(exc).__name__}: {_reason(exc)}")


def _reason(exc: BaseException) -> str:
    """The error's text; a data-dependent branch says what that means here."""
    if _DATA_DEPENDENT in str(exc) or "_local_scalar_dense" in str(exc):
        return ("Python control flow on a tensor's value (bool(), .item(), `if t.all():`) cannot be "
                "traced: the captured program must be the same for all input values; make the branch "
                "depend on shapes or flags, not on values")
    return str(exc)


def _source(fx_node) -> Source | None:
    trace = fx_node.meta.get("stack_trace") or fx_node.stack_trace
    return parse_source(trace) if trace else None


# ---------------------------------------------------------------- tracing

def local_tensor(t):
    """A DTensor parameter's local shard (the rank's actual input); other tensors as is."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def program_inputs(program: Any, data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """All graph inputs by name: a module's parameters and buffers, then the data."""
    named: dict[str, torch.Tensor] = {}
    if isinstance(program, torch.nn.Module):
        for name, p in program.named_parameters(remove_duplicate=False):
            named.setdefault(name, real_view(local_tensor(p).detach()))
        for name, b in program.named_buffers(remove_duplicate=False):
            named.setdefault(name, real_view(local_tensor(b)))
    for name, value in data.items():
        if name in named:
            raise CaptureError(f"data input {name!r} has the same name as a parameter or buffer of the program")
        named[name] = value
    return named


def real_view(t):
    """A complex tensor enters a graph as its real view (a trailing dim of 2: real, imag)."""
    return torch.view_as_real(t) if isinstance(t, torch.Tensor) and t.is_complex() else t


def _complex_state(program: Any) -> set[str]:
    if not isinstance(program, torch.nn.Module):
        return set()
    return {n for n, t in list(program.named_parameters(remove_duplicate=False)) +
            list(program.named_buffers(remove_duplicate=False)) if t.is_complex()}


def dtensor_specs(program: Any) -> dict[str, tuple]:
    """For each DTensor parameter or buffer of a module: (mesh, placements, shape, stride)."""
    specs = {}
    if isinstance(program, torch.nn.Module):
        for name, t in list(program.named_parameters(remove_duplicate=False)) + list(
                program.named_buffers(remove_duplicate=False)):
            if hasattr(t, "to_local"):
                specs[name] = (t.device_mesh, t.placements, t.shape, t.stride())
    return specs


def as_dtensor(local: torch.Tensor, spec: tuple):
    """The DTensor a rank's local shard `local` is part of (spec from :func:`dtensor_specs`)."""
    from torch.distributed.tensor import DTensor
    mesh, placements, shape, stride = spec
    return DTensor.from_local(local, mesh, placements, run_check=False, shape=shape, stride=stride)


def user_attributes(program: Any) -> dict[str, dict]:
    """{state name: the Python attributes a library set on that parameter or buffer} (megatron's
    ``sequence_parallel``, ``tensor_model_parallel``...): the program may read them while it
    runs, so the graph input swapped in for the state must carry them too."""
    if not isinstance(program, torch.nn.Module):
        return {}
    out = {}
    for name, t in list(program.named_parameters()) + list(program.named_buffers()):
        attrs = {k: v for k, v in vars(t).items() if not k.startswith("_")}
        if attrs:
            out[name] = attrs
    return out


def carrying(value: Any, attributes: dict | None) -> Any:
    """`value` with the `attributes` of the state it stands for (those it lacks)."""
    for k, v in (attributes or {}).items():
        if not hasattr(value, k):
            setattr(value, k, v)
    return value


def _call(program: Any, names: list[str], data_names: set[str]) -> Callable:
    """A function of flat tensors that runs `program` with its state swapped in."""
    is_module = isinstance(program, torch.nn.Module)
    specs = dtensor_specs(program)
    complex_state = _complex_state(program)
    attributes = user_attributes(program)

    def run(*flat):
        values = {k: torch.view_as_complex(v) if k in complex_state else v for k, v in zip(names, flat)}
        data = {k: v for k, v in values.items() if k in data_names}
        if not is_module:
            return program(**data)
        state = {k: carrying(as_dtensor(v, specs[k]) if k in specs else v, attributes.get(k))
                 for k, v in values.items() if k not in data_names}
        return torch.func.functional_call(program, state, (), data, strict=False, tie_weights=False)
    return run


def _flatten_outputs(out) -> dict[str, Any]:
    if isinstance(out, dict):
        return {str(k): v for k, v in out.items()}
    if isinstance(out, (tuple, list)):
        return {f"out{i}": v for i, v in enumerate(out)}
    return {"out": out}


def trace(program: Any, data: dict[str, torch.Tensor], label: str = "") -> Graph:
    """Trace one program (in the current process-group state) into the IR."""
    inputs = program_inputs(program, data)
    names = list(inputs)
    fn = _call(program, names, set(data))
    output_names: list[str] = []
    stated: dict = {}

    def flat_fn(*flat):
        outs = _flatten_outputs(fn(*flat))
        output_names[:] = list(outs)
        stated.update(placement_specs(outs))
        return [local_tensor(o) for o in outs.values()]

    try:
        with functional_collectives(), user_stack_traces(), library_tracing(), p2p_recording() as events:
            gm = functional_trace(flat_fn, capture_decompositions())(*inputs.values())
    except Exception as exc:
        raise trace_failure(f"tracing {label or 'the program'}", exc) from exc
    graph = from_fx(gm.graph, names, output_names, label, storage_layouts(gm, list(inputs.values())))
    attach_events(graph, events, gm.graph)
    graph.stated = stated_relations(stated)
    return graph


def storage_layouts(gm, args: list) -> dict:
    """Each node's (strides, storage offset) as eager PyTorch would lay the tensor out,
    from a fake-tensor run of the traced graph on (fakes of) the actual inputs: the values
    a real-mode trace records are not views, so their own offsets say nothing of storage.
    Empty when that run fails (every layout then unknown: rules that need one say so)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    from .meta_layouts import meta_layouts
    layouts = traced_layouts(gm)
    if layouts is not None:
        return layouts
    layouts = meta_layouts(gm, args)
    if layouts is not None:
        return layouts
    try:
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        fakes = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fakes)
    except Exception:  # noqa: BLE001  (any failure: the layouts stay unknown, never guessed)
        return {}
    out = {}
    for n in gm.graph.nodes:
        v = n.meta.get("val")
        if isinstance(v, torch.Tensor) and v.layout == torch.strided:
            out[n] = (tuple(int(s) for s in v.stride()), int(v.storage_offset()))
    return out


def _own_storage(value: torch.Tensor):
    """A constant's (strides, offset) where its storage is exactly its own values (a view
    of a larger storage: unknown, its numpy value does not hold that storage)."""
    if value.layout != torch.strided or not value.is_contiguous() or value.storage_offset() != 0:
        return None
    if value.untyped_storage().nbytes() != value.numel() * value.element_size():
        return None
    return tuple(int(s) for s in value.stride()), 0


def _with_storage(ty, layout):
    if isinstance(ty, TensorType) and layout is not None:
        return replace(ty, strides=layout[0], offset=layout[1])
    return ty


# ---------------------------------------------------------------- FX -> IR

def _op_name(target) -> str:
    import operator
    if target is operator.getitem:
        return "getitem"
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return schema.name.replace("::", ".")
    return getattr(target, "__name__", str(target))


def _type_of(val):
    if isinstance(val, torch.Tensor):
        return TensorType(tuple(int(s) for s in val.shape), DTYPES.get(val.dtype, str(val.dtype)))
    if isinstance(val, (tuple, list)):
        types = tuple(_type_of(v) for v in val)
        return types if any(t is not None for t in types) else None
    return None


def _convert(value, env):
    import torch.fx as fx
    if isinstance(value, fx.Node):
        return env[value]
    if isinstance(value, (list, tuple)):
        return type(value)(_convert(v, env) for v in value)
    if isinstance(value, torch.dtype):
        return DTYPES.get(value, str(value))
    if isinstance(value, (torch.device, torch.layout, torch.memory_format)):
        return str(value)
    return value


def from_fx(fx_graph, input_names: list[str], output_names: list[str], label: str = "",
            storage: dict | None = None) -> Graph:
    """Convert a functional ATen FX graph; collective group names become global rank tuples.
    `storage`: fx node -> (strides, offset), where known (see :func:`storage_layouts`)."""
    for sink in FX_SINKS:
        sink(label, fx_graph, input_names, output_names)
    storage = storage or {}
    graph = Graph(label=label)
    env: dict = {}
    placeholders = iter(input_names)
    gm_owner = fx_graph.owning_module
    for fx_node in fx_graph.nodes:
        if fx_node.op == "placeholder":
            node = Node(next(placeholders), "input",
                        type=_with_storage(_type_of(fx_node.meta.get("val")), storage.get(fx_node)))
        elif fx_node.op == "get_attr":
            value = getattr(gm_owner, fx_node.target)
            node = Node(fx_node.name, "constant", kwargs={"value": value.detach().double().numpy()
                                                          if value.is_floating_point() else value.numpy()},
                        type=_with_storage(_type_of(value), _own_storage(value)))
        elif fx_node.op == "call_function":
            op = _op_name(fx_node.target)
            args = _convert(fx_node.args, env)
            if fx_node.target is torch.ops.higher_order.auto_functionalized:
                # a mutating custom op, functionalized: output 0 is the op's return, then the new
                # values of the arguments it mutates (the op's rule computes them)
                op, args = _op_name(fx_node.args[0]), ()
            kwargs = {k: _convert(v, env) for k, v in fx_node.kwargs.items() if k not in _DROPPED_KWARGS}
            if op.startswith(COLLECTIVE_PREFIXES) and args and isinstance(args[-1], str):
                args = args[:-1] + (group_ranks(args[-1]),)
            node = Node(fx_node.name, op, tuple(args), kwargs,
                        _with_storage(_type_of(fx_node.meta.get("val")), storage.get(fx_node)), _source(fx_node),
                        defects=tuple(fx_node.meta.get("custom", {}).get(DEFECTS_META, ())))
        elif fx_node.op == "output":
            outs = fx_node.args[0]
            for name, value in zip(output_names, outs):
                if value is not None:
                    graph.outputs[name] = env[value]
            continue
        else:
            raise CaptureError(f"unexpected FX node kind {fx_node.op} ({fx_node.name})")
        env[fx_node] = node
        graph.nodes.append(node)
    return graph


# ---------------------------------------------------------------- a whole case

def capture_single(program: Any, data: dict[str, torch.Tensor]) -> Graph:
    return trace(program, data, label="single-device")


def capture_rank(make_program: Callable[[int, int], Any], rank: int, world_size: int,
                 data: dict[str, torch.Tensor], events: bool = False) -> tuple[Graph, Any]:
    """Trace rank `rank`'s program; returns the graph and the program (for its weights).
    With `events`, ``graph.events`` holds the rank's program-order events (torch_events)."""
    with fake_world(rank, world_size):
        try:
            program = make_program(rank, world_size)
        except Exception as exc:
            raise CaptureError(f"building the program for rank {rank} failed: {type(exc).__name__}: {exc}") from exc
        issued = ASYNC_ISSUED[0]
        graph = trace(program, data, label=f"rank {rank}")
        if events:  # an eager run where the rank issues async collectives; else the graph's order
            from .torch_events import program_events, rank_events  # (it imports this module)
            graph.events = rank_events(graph, rank, (lambda: program_events(program, data, rank))
                                       if ASYNC_ISSUED[0] > issued else None)
        return graph, program
