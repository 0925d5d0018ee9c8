"""Capture of training steps (forward, loss, ``torch.autograd.grad``, optimizer update) into
the Graph IR, and the functional optimizer pieces both sides use.

The single-device step is written here from the :class:`~shardproof.case.Train` spec (the
reference); each rank's step is its program's own ``train_step``. Both are traced by
``make_fx`` as one joint graph: autograd runs above the tracer, so backward ops (and the
collectives in custom autograd functions' backwards, e.g. Megatron's f/g operators) are
recorded like any other op. Parameters, buffers, optimizer state and data are graph inputs.
"""
from __future__ import annotations

import contextlib
import inspect
from typing import Any, Callable

import torch
from torch.nn.utils.stateless import _reparametrize_module
from torch.overrides import TorchFunctionMode
import torch.fx.traceback as fx_traceback

from ..case import SGD, AdamW, Train
from ..ir.graph import Graph
from .torch_placements import placement_specs, stated_relations
from .torch_collectives import ASYNC_ISSUED
from .torch_capture import (CaptureError, as_dtensor, carrying, dtensor_specs, fake_world, from_fx, functional_collectives,
                            user_attributes, innermost_user_frame, local_tensor, storage_layouts, trace_failure, user_stack_traces)
from .torch_fsdp import fsdp_params, fsdp_tracing, lazy_init, load_shard
from .torch_libraries import library_tracing
from .torch_decomp import capture_decompositions
from .torch_p2p import attach_events, recording as p2p_recording
from .trace_meta import frame_lines, functional_trace

STATE_SEP = ":"


# ---------------------------------------------------------------- functional optimizer pieces

OPAQUE_UPDATE: list = [None]
"""While set (frontends/torch_tail_calls.opaque_updates): what optimizer_update calls instead."""


def optimizer_update(param: torch.Tensor, grad: torch.Tensor, state: dict, optimizer) -> torch.Tensor:
    """The parameter after one step of `optimizer` (SGD or AdamW, as torch.optim computes it)."""
    if OPAQUE_UPDATE[0] is not None:
        return OPAQUE_UPDATE[0](param, grad, state, optimizer)
    return plain_update(param, grad, state, optimizer)


def plain_update(param: torch.Tensor, grad: torch.Tensor, state: dict, optimizer) -> torch.Tensor:
    """:func:`optimizer_update` as elementwise torch ops."""
    if isinstance(optimizer, SGD):
        g = grad + optimizer.weight_decay * param if optimizer.weight_decay else grad
        if optimizer.momentum:
            g = optimizer.momentum * state["momentum_buffer"] + g
        return param - optimizer.lr * g
    if isinstance(optimizer, AdamW):
        b1, b2 = optimizer.betas
        t = optimizer.step
        m = b1 * state["exp_avg"] + (1 - b1) * grad
        v = b2 * state["exp_avg_sq"] + (1 - b2) * grad * grad
        denom = torch.sqrt(v / (1 - b2 ** t)) + optimizer.eps
        return param * (1 - optimizer.lr * optimizer.weight_decay) - (optimizer.lr / (1 - b1 ** t)) * m / denom
    raise CaptureError(f"unsupported optimizer {type(optimizer).__name__}; use shardproof.case.SGD or AdamW")


def clip_coefficient(total_norm: torch.Tensor, max_norm: float) -> torch.Tensor:
    """The factor torch.nn.utils.clip_grad_norm_ scales every gradient by."""
    return torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)


def global_norm(grads) -> torch.Tensor:
    """L2 norm over all gradients (each counted once): the single-device clip norm."""
    return torch.sqrt(sum((g * g).sum() for g in grads))


def state_values(params: dict[str, torch.Tensor], optimizer) -> dict[str, dict[str, torch.Tensor]]:
    """Optimizer state for each parameter, as an elementwise function of its value: a rank's
    state is then laid out exactly as its parameter is (value matching relates it), while
    the proof treats every state tensor as an independent input."""
    names = optimizer.state_names if optimizer else ()
    return {name: {s: _state_of(p, s) for s in names} for name, p in params.items()}


def _state_of(param: torch.Tensor, state: str) -> torch.Tensor:
    """One optimizer state as :func:`state_values` makes it: elementwise in the parameter."""
    p = param.detach().double()
    made = {"momentum_buffer": lambda: torch.sin(3 * p + 1) / 4, "exp_avg": lambda: torch.sin(3 * p + 1) / 10,
            "exp_avg_sq": lambda: (2 + torch.cos(5 * p)) / 100}
    return made[state]().to(torch.float32)


def state_source(optimizer):
    """``made_from`` for :func:`~shardproof.relations.infer.resolve_inputs`: an input
    ``<state>:<param>`` of a step is made from input ``<param>`` by :func:`_state_of` (the
    same elementwise code on the single device and every rank); None for other inputs."""
    names = set(optimizer.state_names if optimizer else ())

    def made_from(name: str):
        state, sep, param = name.partition(STATE_SEP)
        if not sep or state not in names:
            return None
        return (param, lambda seq_param: f"{state}{STATE_SEP}{seq_param}",
                lambda values: _state_of(torch.as_tensor(values), state).numpy())
    return made_from


def split_microbatches(inputs: dict[str, torch.Tensor], k: int, dim: int = 0) -> list[dict[str, torch.Tensor]]:
    """`k` microbatches along `dim` of every input (torch.chunk)."""
    chunks = {n: t.chunk(k, dim) for n, t in inputs.items()}
    if any(len(c) != k for c in chunks.values()):
        raise CaptureError(f"cannot split the batch into {k} microbatches along dim {dim}")
    return [{n: c[i] for n, c in chunks.items()} for i in range(k)]


def microbatch_position(index: int):
    """Mark what runs inside as microbatch `index` of a gradient-accumulation loop: its traced
    nodes (a finding then names the microbatch) and its ops in a rank's record
    (rank_classes: microbatches grouped by equal programs)."""
    from .torch_p2p import pipeline_position
    return pipeline_position(None, index)


# ---------------------------------------------------------------- the reference step

def loss_of(train: Train, outputs, inputs: dict) -> torch.Tensor:
    if callable(train.loss):
        return train.loss(outputs, inputs)
    if isinstance(outputs, dict):
        return outputs[train.loss]
    if train.loss == "out" and isinstance(outputs, torch.Tensor):
        return outputs
    raise CaptureError(f"the loss {train.loss!r} is not an output of the program")


def forward_inputs(model: torch.nn.Module, inputs: dict) -> dict:
    """The inputs `model`'s forward takes (the others, e.g. targets, are the loss's)."""
    params = inspect.signature(model.forward).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(inputs)
    return {k: v for k, v in inputs.items() if k in params}


def reference_step(model: torch.nn.Module, inputs: dict, state: dict, train: Train) -> dict:
    """The single-device training step the distributed one must equal: the loss over the
    whole batch, its gradients, clipping by the global norm, the optimizer update."""
    params = dict(model.named_parameters())
    loss = loss_of(train, model(**forward_inputs(model, inputs)), inputs)
    grads = dict(zip(params, torch.autograd.grad(loss, list(params.values()), allow_unused=True)))
    grads = {n: torch.zeros_like(params[n]) if g is None else g for n, g in grads.items()}
    if train.grad_clip is not None:
        coef = clip_coefficient(global_norm(grads.values()), train.grad_clip)
        grads = {n: g * coef for n, g in grads.items()}
    result = {"loss": loss, "grads": grads}
    if train.optimizer is not None:
        result["updated"] = {n: optimizer_update(params[n], grads[n], state[n], train.optimizer) for n in params}
    return result


# ---------------------------------------------------------------- tracing

def step_inputs(program: torch.nn.Module, data: dict, train: Train) -> dict[str, torch.Tensor]:
    """All graph inputs of a step by name: parameters, buffers, optimizer state
    (``<state>:<param>``), then the data."""
    if not isinstance(program, torch.nn.Module):
        raise CaptureError("a training case needs modules (the parameters are what gradients are taken of)")
    params = {n: local_tensor(p).detach() for n, p in program.named_parameters()}
    named = dict(params)
    named.update({n: local_tensor(b) for n, b in program.named_buffers()})
    for pname, states in state_values(params, train.optimizer).items():
        for sname, value in states.items():
            named[f"{sname}{STATE_SEP}{pname}"] = value
    for name, value in data.items():
        if name in named:
            raise CaptureError(f"data input {name!r} has the same name as a parameter, buffer or state of the program")
        named[name] = value
    return named


def _flatten(result: dict, params: list[str]) -> dict[str, torch.Tensor]:
    if not isinstance(result, dict) or "loss" not in result or "grads" not in result:
        raise CaptureError("a training step must return {'loss': ..., 'grads': {param: grad}, 'updated': {...}}")
    out = {"loss": result["loss"]}
    for kind in ("grads", "updated"):
        for name, t in (result.get(kind) or {}).items():
            if name not in params:
                raise CaptureError(f"the step returns {kind} for {name!r}, which is not a parameter of the program")
            out[f"{kind[:-1] if kind == 'grads' else kind}{STATE_SEP}{name}"] = t
    return out


class ForwardLines(TorchFunctionMode):
    """Backward ops are traced while ``autograd.grad`` runs, so their own stack is that
    call's. Tag each autograd node the forward makes with the user's line that made it, and
    trace its backward under that line (as aot_autograd does for joint graphs): a broken
    gradient then points at the forward op it is the gradient of."""

    def __init__(self):
        super().__init__()
        self._tagged: set = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            for node in self._made_by_call(t.grad_fn if isinstance(t, torch.Tensor) else None):
                frame = innermost_user_frame()
                if frame is not None:
                    line = frame_lines(frame.filename, frame.lineno, frame.name)
                    node.register_prehook(lambda grad_outputs, line=line: fx_traceback.set_stack_trace(line))
                    node.register_hook(lambda grad_inputs, grad_outputs: fx_traceback.set_stack_trace([]))
        return out

    def _made_by_call(self, node) -> list:
        """`node` and the untagged autograd nodes behind it: one call may make several (a
        linear on a 3-d input is a view, an addmm and a view), and each backward op of them
        belongs to the call's line. Nodes an earlier call made are tagged already; a custom
        autograd.Function's backward behind it keeps its own lines (its code is the user's)."""
        made, stack = [], [node]
        while stack:
            n = stack.pop()
            if n is None or n in self._tagged or type(n).__name__ == "AccumulateGrad" or (
                    made and isinstance(n, torch.autograd.function.BackwardCFunction)):
                continue
            self._tagged.add(n)
            made.append(n)
            stack.extend(nxt for nxt, _ in n.next_functions)
        return made


def step_function(program: torch.nn.Module, data: dict, train: Train, step: Callable):
    """``(flat_fn, inputs, output_names, stated, specs)``: the step as a function of its flat
    inputs (see :func:`trace_step`); `output_names` and `stated` are filled when it runs."""
    inputs = step_inputs(program, data, train)
    names = list(inputs)
    params = [n for n, _ in program.named_parameters()]
    buffers = [n for n, _ in program.named_buffers()]
    fsdp = fsdp_params(program)  # FSDP2 holds these shards itself: loaded into it, not swapped
    if fsdp:
        lazy_init(program)
    specs = {n: spec for n, spec in dtensor_specs(program).items() if n not in fsdp}
    attributes = user_attributes(program)
    output_names: list[str] = []
    stated: dict = {}

    def as_program_sees(value, param):
        return carrying(as_dtensor(value, specs[param]) if param in specs else value, attributes.get(param))

    def flat_fn(*flat):
        values = dict(zip(names, flat))
        with torch.enable_grad():
            for n, fsdp_param in fsdp.items():
                load_shard(fsdp_param, values[n])
            # parameters are leaves (a DTensor one too: made from its shard, then requiring grad), so
            # loss.backward() accumulates their .grad and runs their post-accumulate-grad hooks
            swapped = {n: as_program_sees(values[n], n).requires_grad_(True) if n in params
                       else as_program_sees(values[n], n) for n in params + buffers if n not in fsdp}
            state = {p: {s: as_program_sees(values[f"{s}{STATE_SEP}{p}"], p)
                         for s in (train.optimizer.state_names if train.optimizer else ())} for p in params}
            batch = {n: values[n] for n in data}
            with _reparametrize_module(program, swapped):
                outs = _flatten(step(program, batch, state, train), params)
        output_names[:] = list(outs)
        stated.update(placement_specs(outs))
        return [local_tensor(o).detach() if isinstance(o, torch.Tensor) else o for o in outs.values()]
    return flat_fn, inputs, output_names, stated, specs


def trace_step(program: torch.nn.Module, data: dict, train: Train, step: Callable, label: str,
               keep: dict | None = None) -> tuple[Graph, dict]:
    """Trace ``step(program, inputs, state, train)`` (program state swapped for graph
    inputs, parameters requiring grad) into the IR; returns the graph and its input values.
    A DTensor parameter's graph input is the rank's local shard, seen by the step as that
    DTensor (its optimizer state too), and what the step returns as DTensors is taken
    locally: the rank's program is what DTensor runs on that rank, collectives included.
    With `keep`, ``keep["gm"]`` is the traced fx module; ``keep["ir"] = False`` beforehand: the
    fx module alone is wanted (the graph returned holds the stated relations, no nodes)."""
    flat_fn, inputs, output_names, stated, specs = step_function(program, data, train, step)
    names = list(inputs)
    fsdp = fsdp_params(program)
    try:
        with functional_collectives(), user_stack_traces(), fx_traceback.preserve_node_meta(), ForwardLines(), \
                library_tracing(), fsdp_tracing() if fsdp else contextlib.nullcontext(), p2p_recording() as events:
            gm = functional_trace(flat_fn, capture_decompositions())(*inputs.values())
    except CaptureError:
        raise
    except Exception as exc:
        raise trace_failure(f"tracing the training step of {label}", exc) from exc
    if keep is not None and keep.get("ir") is False:
        graph = Graph(label=label)
    else:
        graph = from_fx(gm.graph, names, output_names, label, storage_layouts(gm, list(inputs.values())))
        attach_events(graph, events, gm.graph)
    graph.stated = stated_relations(stated)
    graph.stated_inputs = stated_relations({n: spec[:2] for n, spec in specs.items()})
    if keep is not None:  # the traced module, for graphs derived from this one (rank_classes)
        keep["gm"] = gm
    return graph, inputs


def capture_single_step(model: Any, data: dict, train: Train) -> tuple[Graph, dict]:
    return trace_step(model, data, train, reference_step, "single-device")


def capture_rank_step(make_program: Callable[[int, int], Any], rank: int, world_size: int, data: dict,
                      train: Train, events: bool = False, keep: dict | None = None) -> tuple[Graph, dict]:
    """Trace rank `rank`'s ``train_step``; with `events`, ``graph.events`` holds its
    program-order events (torch_events.step_events); `keep`: see :func:`trace_step`."""
    with fake_world(rank, world_size):
        try:
            program = make_program(rank, world_size)
        except Exception as exc:
            raise CaptureError(f"building the program for rank {rank} failed: {type(exc).__name__}: {exc}") from exc
        if not callable(getattr(program, "train_step", None)):
            raise CaptureError(f"the distributed program of rank {rank} ({type(program).__name__}) has no "
                               f"train_step(inputs, state, train) method; a training case needs one")
        issued = ASYNC_ISSUED[0]
        graph, inputs = trace_step(program, data, train, lambda m, *a: m.train_step(*a), f"rank {rank}", keep)
        if events:  # an eager run where the rank issues async collectives; else the graph's order
            from .torch_events import rank_events, step_events  # (it imports torch_capture)
            graph.events = rank_events(graph, rank, (lambda: step_events(program, data, train, rank))
                                       if ASYNC_ISSUED[0] > issued else None)
        return graph, inputs
