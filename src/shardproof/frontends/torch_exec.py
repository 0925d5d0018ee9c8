"""Execute graph dumps and HLO / StableHLO modules with torch's own kernels: an
independent confirmation of what the proof and the numpy numerics say.

Every node runs as PyTorch would run it:

* ATen and prims nodes call ``torch.ops.<ns>.<op>`` (the overload is resolved by torch
  from the arguments, as the dump printed them);
* XLA ops, framework custom ops (apex, vLLM, Neuron custom calls) and Python operators
  run the torch implementations of :mod:`.torch_exec_ops` (one entry per op);
* collectives are computed across the ranks' values in lockstep
  (:func:`shardproof.engine.lockstep.run_lockstep`: matched per group in program order, as
  a process group matches them), with the groups and reduce ops the IR records;
* random ops draw corresponding randomness when the caller gives the proved
  correspondence (:mod:`shardproof.engine.rng`, :mod:`.torch_rng`);
* a node whose op has none of these raises :class:`NotExecutable` (the caller reports
  "not confirmed"); so do random ops without that correspondence, constants whose value
  the dump does not print, and any node torch refuses or whose result does not have the
  graph's shape.

Dtypes. Float values are *held in float64*: a float32 graph is executed in float64, so that
the single-device and distributed results differ only by float64 rounding. Low-precision
floats (f16, bf16) keep their semantics where the graph casts to them: the result of a
cast (``_to_copy``, ``xla.convert``, any op given a ``dtype``) is rounded to that format
(``round_low_precision="every"`` rounds every f16/bf16 node, as stored tensors would be;
``"none"`` rounds nothing: float64 throughout, as the numpy numerics compute).
Integer and bool values keep their exact dtype, and every result is brought to the dtype
the graph declares for it (so an HLO ``divide`` of s32 values truncates).

Layouts. The IR records shapes, not strides (dumps drop ``memory_format``), so a ``view`` of
a value that is not contiguous here is computed as a ``reshape`` (the same values). An
unprinted constant that the relations state is the same in every program (``shared``) gets
one random value drawn from its name; any other unprinted constant is not executable.

``torch.empty``-like buffers are filled with NaN: a program that reads uninitialized memory
propagates NaN instead of agreeing by luck.

Random ops. Dropout with p = 0 (or outside training) is the identity with an all-true mask,
computed here rather than by torch's kernel: on CUDA, ``native_dropout(x, 0.0, True)`` still
drops an element now and then (the real GPT dump's single-device loss moved by 7e-5 relative).

Values are freed after their last use. :func:`estimate_bytes` gives the peak a run needs
(before allocating anything), so callers can refuse graphs too large to execute here.
"""
from __future__ import annotations

import math
import os
import zlib

import numpy as np
import torch

from ..engine.lockstep import run_lockstep
from ..engine.rng import RANDOM_OPS as RANDOM
from ..ops.registry import lookup
from ..ir.graph import DistributedProgram, Graph, Node, TensorType
from .torch_exec_ops import COLLECTIVES, FRAMEWORK, HELD, LOW_PRECISION, PYTHON, XLA
from .torch_chunks import ChunkRun, Lazy, plan_chunks
from .torch_stream import Spill, Spilled, estimate_bytes, held_as_declared, unspill

__all__ = ["NotExecutable", "execute", "estimate_bytes", "draw_inputs", "draw_program_inputs"]


class NotExecutable(RuntimeError):
    """A node this executor cannot run (or that torch refuses): the programs are not
    confirmed by execution. `op` is the node's op, `node` its name."""

    def __init__(self, op: str, reason: str = "", node: str | None = None):
        self.op, self.reason, self.node = op, reason, node
        where = f" at %{node}" if node else ""
        super().__init__(f"{op}{where}: {reason}" if reason else f"{op}{where}")


EMPTY = {"aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty", "aten.new_empty_strided",
         "aten.empty_permuted"}
CASTS = {"aten._to_copy", "aten.to", "aten.type_as", "prims.convert_element_type", "xla.convert",
         "aten._autocast_to_reduced_precision", "aten._autocast_to_full_precision"}


# ------------------------------------------------------------------ one node


def _dtype_arg(value):
    """Dump dtype strings (``"f32"``) become the torch dtype the value is held in."""
    if isinstance(value, str) and value in HELD:
        return HELD[value]
    if isinstance(value, list):
        return [_dtype_arg(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_dtype_arg(v) for v in value)
    if isinstance(value, dict):
        return {k: _dtype_arg(v) for k, v in value.items()}
    return value


def _aten(op: str):
    ns, _, name = op.partition(".")
    if ns not in ("aten", "prims") or not name:
        return None
    try:
        return getattr(getattr(torch.ops, ns), name)
    except (AttributeError, RuntimeError):
        return None


def _deterministic_dropout(op: str, args, kwargs) -> bool:
    """dropout with p = 0 or outside training draws nothing."""
    if op not in ("aten.native_dropout", "aten.dropout"):
        return False
    p = kwargs.get("p", args[1] if len(args) > 1 else None)
    train = kwargs.get("train", args[2] if len(args) > 2 else True)
    return p == 0 or train is False


def _run_op(node: Node, args, kwargs, draw=None):
    """`draw()`: the values a random node draws (None: random ops are not executable)."""
    op = node.op
    if op in XLA or op in FRAMEWORK:
        return (XLA.get(op) or FRAMEWORK[op])(*args, **kwargs)
    if op in PYTHON:
        return PYTHON[op](*args, **kwargs)
    if op == "getitem":
        return args[0][args[1]]
    kernel = _aten(op)
    if kernel is None:
        opdef = lookup(op)
        kernel = opdef.torch_impl if opdef is not None else None
    if kernel is None:
        raise NotExecutable(op, "no torch kernel, no entry in the executor's table and no torch_impl declared "
                                "for it", node.name)
    if _deterministic_dropout(op, args, kwargs):  # not torch's kernel: on CUDA, p = 0 still drops
        x = args[0]                                  # an element now and then (uniform draws reach 1.0)
        return (x.clone(), torch.ones_like(x, dtype=torch.bool)) if op == "aten.native_dropout" else x.clone()
    if op in RANDOM and draw is not None:
        from .torch_rng import run_random
        return run_random(op, draw(), args, kwargs)
    if op in RANDOM:
        raise NotExecutable(op, "a random op: the programs cannot draw the same randomness", node.name)
    if isinstance(kwargs.get("device"), str):
        kwargs = {k: v for k, v in kwargs.items() if k != "device"}
    if op in ("aten.view", "aten._unsafe_view") and torch.is_tensor(args[0]) and not args[0].is_contiguous():
        kernel = torch.ops.aten.reshape  # strides are not in the IR: the same values without torch's layout
    out = kernel(*_dtype_arg(args), **_dtype_arg(kwargs))
    if op in EMPTY and out.is_floating_point():
        out = out.fill_(math.nan)
    elif op in EMPTY:
        out = out.zero_()
    return out


def _coerce(value, ty, node: Node, rounding: bool, device):
    """`value` in the dtype the graph declares (held as :data:`HELD` says), with its shape
    checked; low-precision floats rounded to their format when `rounding`."""
    if isinstance(ty, tuple) and isinstance(value, (tuple, list)):
        return tuple(_coerce(v, t, node, rounding, device) if t is not None else v
                     for v, t in zip(value, tuple(ty) + (None,) * (len(value) - len(ty))))
    if not isinstance(ty, TensorType):
        return value
    if not torch.is_tensor(value):
        if isinstance(value, (int, float, bool)):
            value = torch.tensor(value)
        else:
            return value
    held = HELD.get(ty.dtype)
    if held is None:
        raise NotExecutable(node.op, f"values of type {ty.dtype} are not supported", node.name)
    if value.device != torch.device(device):
        value = value.to(device)
    if value.dtype != held:
        value = value.to(held)
    if rounding and ty.dtype in LOW_PRECISION:
        value = value.to(LOW_PRECISION[ty.dtype]).to(held)
    if tuple(value.shape) != tuple(ty.shape):
        raise NotExecutable(node.op, f"torch gives shape {list(value.shape)}, the graph says {list(ty.shape)}",
                            node.name)
    return value


def _resolve(value, env: dict):
    if isinstance(value, Node):
        found = env[value]
        if isinstance(found, Lazy):  # a node that cannot take it in chunks: assembled whole
            env[value] = found = found.whole()
        return unspill(found, env, value) if isinstance(found, Spilled) else found
    if isinstance(value, (list, tuple)):
        return type(value)(_resolve(v, env) for v in value)
    if isinstance(value, dict):
        return {k: _resolve(v, env) for k, v in value.items()}
    return value


def _shared_value(node: Node, device):
    """An unprinted constant stated to be the same in every program (kwarg ``shared``):
    one random value drawn from its name, so every program that reads it reads the same."""
    ty = node.type
    rng = np.random.default_rng(zlib.crc32(str(node.kwargs["shared"]).encode()))
    held = HELD.get(ty.dtype, torch.float64)
    if held.is_floating_point:
        value = rng.standard_normal(ty.shape)
    else:
        value = rng.integers(0, 2, size=ty.shape)
    return torch.as_tensor(value, device=device).to(held)


def _constant(node: Node, device):
    value = node.kwargs.get("value")
    if value is None:
        if node.type is None:
            return None
        if node.kwargs.get("shared") is not None and isinstance(node.type, TensorType):
            return _shared_value(node, device)
        raise NotExecutable("constant", f"the value of {node.name} is not in the dump", node.name)
    if not isinstance(node.type, TensorType):
        return value
    held = HELD.get(node.type.dtype, torch.float64)
    t = torch.as_tensor(np.asarray(value), device=device).to(held)
    return t.expand(node.type.shape).clone() if tuple(t.shape) != tuple(node.type.shape) else t


class _Runner:
    """Runs one graph's local nodes, freeing each value after its last use."""

    def __init__(self, graph: Graph, inputs: dict, rounding: str, device, randomness=None, rank=None, spill=None,
                 chunks: bool = False):
        self.graph, self.inputs, self.device = graph, inputs, device
        self.randomness, self.rank, self.spill = randomness, rank, spill
        self.every, self.never = rounding == "every", rounding == "none"
        self.index = {n: i for i, n in enumerate(graph.nodes)}
        last = {n: i for i, n in enumerate(graph.nodes)}
        for i, n in enumerate(graph.nodes):
            for x in n.inputs:
                last[x] = i
        self.plan = plan_chunks(graph) if chunks else None
        self.early: dict = {}  # results of sinks run in an earlier sink's chunks
        for x, sinks in (self.plan.reads() if self.plan is not None else {}).items():  # read by a sink's chunks
            last[x] = max([last[x]] + [self.index[s] for s in sinks])
        keep = set(graph.outputs.values())
        self.dies: dict[int, list[Node]] = {}
        for n, i in last.items():
            if n not in keep:
                self.dies.setdefault(i, []).append(n)
        self.freed = 0

    def free_before(self, i: int, env: dict) -> None:
        while self.freed < i:
            for n in self.dies.get(self.freed, ()):
                gone = env.pop(n, None)
                if isinstance(gone, Spilled):
                    os.remove(gone.path)
            self.freed += 1

    def __call__(self, rank: int, node: Node, env: dict):
        if self.spill is not None:  # one rank at a time: the others' values on disk
            self.spill.switch_to(rank, env)
        self.free_before(self.index[node], env)
        if node.op == "input":
            if node.name not in self.inputs:
                raise NotExecutable("input", f"no value given for input {node.name}", node.name)
            # a copy: programs may write into their inputs, and the caller's arrays are shared
            # between the single-device program and the ranks that replicate them
            value = torch.as_tensor(np.asarray(self.inputs[node.name]), device=self.device)
            held = HELD.get(getattr(node.type, "dtype", None))
            value = value.clone() if held is None or value.dtype == held else value.to(held)  # one copy, as held
            return _coerce(value, node.type, node, self.every, self.device)
        if node.op == "constant":
            return _constant(node, self.device)
        if self.plan is not None and node in self.plan.lazy:
            return Lazy(node, self._chunk_run(env))
        if self.plan is not None and node in self.plan.dead:  # reads a lazy value, read by nothing
            return None
        if self.plan is not None and node in self.plan.early:  # run in an earlier sink's chunks
            return _coerce(self.early.pop(node), node.type, node, self._rounding(node), self.device)
        try:
            with torch.no_grad():
                if self.plan is not None and node in self.plan.sinks:  # a chunk at a time (torch_chunks.py)
                    self.early.update(self._chunk_run(env).run_sink(self.plan.sinks[node]))
                    out = self.early.pop(node)
                else:
                    args, kwargs = _resolve(node.args, env), _resolve(node.kwargs, env)
                    out = _run_op(node, args, kwargs, self._draw(node))
        except NotExecutable:
            raise
        except Exception as exc:  # torch refuses the node: not confirmed, with torch's reason
            raise NotExecutable(node.op, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                                node.name) from exc
        return _coerce(out, node.type, node, self._rounding(node), self.device)

    def _rounding(self, node: Node) -> bool:
        return not self.never and (self.every or node.op in CASTS or "dtype" in node.kwargs)

    def _draw(self, node: Node):
        return None if self.randomness is None else (lambda: self.randomness.draw(self.rank, node))

    def _chunk_run(self, env: dict) -> ChunkRun:
        def draw_range(node, start, count):
            return self.randomness.draw_range(self.rank, node, start, count)

        def coerce(node, value, ty):
            return _coerce(value, ty, node, self._rounding(node), self.device)
        return ChunkRun(self.plan, lambda x: _resolve(x, env), lambda node, a, k, d: _run_op(node, a, k, d), coerce,
                        None if self.randomness is None else draw_range)


def _collective(nodes: list[Node], args: list[tuple]):
    op = nodes[0].op
    fn = COLLECTIVES.get(op)
    if fn is None:
        raise NotExecutable(op, "no collective of that name in the executor's table", nodes[0].name)
    args = [unspill(a) for a in args]
    try:
        with torch.no_grad():
            outs = fn([a[0] for a in args], [tuple(a[1:]) for a in args])
    except Exception as exc:
        raise NotExecutable(op, f"{type(exc).__name__}: {exc}", nodes[0].name) from exc
    return [_coerce(o, n.type, n, False, o.device) for o, n in zip(outs, nodes)]


def _numpy(value):
    if torch.is_tensor(value):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _run(graphs: list[Graph], inputs: list[dict], rounding: str, device, randomness=None,
         single: bool = False, stream: bool = False, chunks: bool = False) -> list[dict]:
    spill = Spill() if stream and len(graphs) > 1 else None
    runners = [_Runner(g, inputs[r], rounding, device, randomness, None if single else r, spill, chunks)
               for r, g in enumerate(graphs)]
    try:
        result = run_lockstep(graphs, lambda r, n, env: runners[r](r, n, env), _collective)
        if result.mismatch is not None:
            node = result.mismatch.nodes[0]
            raise NotExecutable(node.op, result.mismatch.message, node.name)
        return [{name: _numpy(unspill(env[n])) for name, n in g.outputs.items()}
                for g, env in zip(graphs, result.envs)]
    finally:
        if spill is not None:
            spill.close()


def execute(seq: Graph, dist: DistributedProgram, seq_inputs: dict[str, np.ndarray],
            rank_inputs: list[dict[str, np.ndarray]], *, round_low_precision: str = "casts",
            device: str = "cpu", randomness=None, seed: int = 0, stream: bool = False,
            precision: str = "f64", chunks: bool = False) -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
    """Run the single-device graph and every rank's graph with torch's kernels; returns
    (output name -> value, [output name -> value per rank]). Float values come back in
    float64 (see the module docstring); raises :class:`NotExecutable` naming the first node
    that cannot run. `device` ("cpu", "cuda"): where the tensors live; the results agree
    (the real GPT dump: 6e-16 on CPU in 32 s, 0 on an H200 in 3 s). `randomness` (a
    :class:`~shardproof.engine.rng.RandomPlan`): random ops draw corresponding randomness
    (value set `seed`, :mod:`.torch_rng`); without it, or where it is blocked, a random op
    is not executable. `stream`: the ranks run one at a time, the others' values on disk
    (:class:`.torch_stream.Spill`); `precision` "declared": f32 values held in float32 (half
    the memory, :func:`.torch_stream.held_as_declared`); `chunks`: the largest values are computed
    a chunk at a time and never held whole (:mod:`.torch_chunks`)."""
    if precision == "declared":
        with held_as_declared():
            return execute(seq, dist, seq_inputs, rank_inputs, round_low_precision=round_low_precision,
                           device=device, randomness=randomness, seed=seed, stream=stream, chunks=chunks)
    if round_low_precision not in ("casts", "every", "none"):
        raise ValueError("round_low_precision is 'casts', 'every' or 'none'")
    if randomness is not None and randomness.blocked:
        raise NotExecutable("random op", randomness.blocked)
    from .torch_rng import Randomness
    rng = None if randomness is None else Randomness(randomness, seed, device)
    single = _run([seq], [seq_inputs], round_low_precision, device, rng, single=True, chunks=chunks)[0]
    ranks = _run(dist.graphs, rank_inputs, round_low_precision, device, rng, stream=stream, chunks=chunks)
    return single, ranks


# ------------------------------------------------------------------ memory


# ------------------------------------------------------------------ inputs

_PASS_THROUGH = {"aten.view", "aten.reshape", "aten._unsafe_view", "aten.unsqueeze", "aten.squeeze", "aten.clone",
                 "aten.expand", "aten.slice", "aten.t", "aten.permute", "aten.transpose", "aten.alias",
                 "aten._to_copy", "aten.contiguous", "aten.flatten", "xla.convert", "xla.broadcast_in_dim",
                 "xla.slice", "aten.select", "aten.detach", "aten.lift_fresh_copy"}


def _index_bound(graph: Graph, users: dict, node: Node) -> int | None:
    """The largest valid index + 1 for an integer input, read off the ops that use it (or
    a view of it) as indices; None where none does."""
    bounds, todo, seen = [], [node], set()
    while todo:
        x = todo.pop()
        if x in seen:
            continue
        seen.add(x)
        for u in users.get(x, ()):
            a = u.args
            if u.op in _PASS_THROUGH and a and a[0] is x:
                todo.append(u)
            elif u.op == "aten.embedding" and len(a) > 1 and a[1] is x:
                bounds.append(a[0].shape[0])
            elif u.op == "aten.index" and len(a) > 1 and isinstance(a[1], (list, tuple)):
                bounds += [a[0].shape[k] for k, i in enumerate(a[1]) if i is x]
            elif u.op in ("aten.index_select", "aten.gather") and len(a) > 2 and a[2] is x:
                bounds.append(a[0].shape[a[1]])
            elif u.op == "xla.gather" and len(a) > 1 and a[1] is x:
                dims = u.kwargs.get("start_index_map") or range(len(a[0].shape))
                bounds += [a[0].shape[d] for d in dims]
            elif u.op == "_C.rotary_embedding" and u.kwargs.get("positions") is x:
                bounds.append(u.kwargs["cos_sin_cache"].shape[0])
    return min(bounds) if bounds else None


def draw_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Random values for `graph`'s inputs from ``np.random.default_rng(seed)``: floats
    standard normal (rounded to f16/bf16 for inputs of those types), bools fair coins,
    integers uniform below the bound the graph's index ops give (embedding rows, indexed
    dim sizes, gather operands), else in {0, 1}."""
    rng = np.random.default_rng(seed)
    users = graph.users()
    out = {}
    for n in graph.inputs:
        ty = n.type
        if not isinstance(ty, TensorType):
            continue
        held = HELD.get(ty.dtype, torch.float64)
        if held.is_floating_point:
            x = rng.standard_normal(ty.shape)
            if ty.dtype in LOW_PRECISION:
                x = torch.as_tensor(x).to(LOW_PRECISION[ty.dtype]).double().numpy()
            out[n.name] = x
        elif held is torch.bool:
            out[n.name] = rng.integers(0, 2, size=ty.shape).astype(bool)
        else:
            bound = _index_bound(graph, users, n) or 2
            out[n.name] = rng.integers(0, bound, size=ty.shape).astype(torch.empty(0, dtype=held).numpy().dtype)
    return out


def draw_program_inputs(seq: Graph, dist: DistributedProgram, bindings: dict, seed: int = 0):
    """(single-device inputs, [each rank's inputs]): :func:`draw_inputs` for the
    single-device graph, and each rank's values derived from them through the input
    relations by the numeric check's own :func:`~shardproof.engine.verify.numeric_inputs`."""
    from ..engine.verify import numeric_inputs  # the engine layer derives rank values from relations
    return numeric_inputs(seq, dist, bindings, draw_inputs(seq, seed), seed)
