"""The JAX front door: lower a case's JAX programs to StableHLO and import them.

A JAX case (``Case(backend="jax", ...)``) gives ``single``, a JAX function of the inputs
(positionally, in the order of ``inputs``), and ``distributed``, a function of a 1-D
device mesh returning the per-device program wrapped in ``shard_map`` over it;
``in_specs`` gives each input's ``PartitionSpec`` over the mesh axis. Both are lowered
with ``jax.jit(...).lower(...).as_text(debug_info=True)`` on host (CPU) devices and read by
:mod:`shardproof.frontends.stablehlo_text`; nothing is compiled or run. Input relations
follow from ``in_specs`` (the mesh axis on dim d: ``Shard(d)``; none: ``Replicate()``).

JAX fixes its device count when it is first imported: call :func:`host_devices` before
``import jax`` (case files do so at the top).
"""
from __future__ import annotations

import os
import sys

import numpy as np

from .stablehlo_text import load_stablehlo_program

FLAG = "--xla_force_host_platform_device_count"


class JaxError(Exception):
    """A JAX case that cannot be lowered (bad input)."""


def host_devices(n: int = 8) -> None:
    """Ask XLA for at least `n` host devices (only effective before jax is imported)."""
    if "jax" in sys.modules:
        return
    flags = os.environ.get("XLA_FLAGS", "")
    if FLAG not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {FLAG}={n}".strip()


def spec_relation(spec, ndim: int, axis: str) -> str:
    """``P(None, "tp")`` over mesh axis ``tp`` -> ``Shard(1)``; no axis -> ``Replicate()``."""
    entries = list(spec or ()) + [None] * ndim
    dims = [d for d in range(ndim) if entries[d] == axis or (isinstance(entries[d], tuple) and axis in entries[d])]
    return f"Shard({dims[0]})" if dims else "Replicate()"


def lower_case(case, world: int):
    """(single-device Graph, per-rank Graphs, relations by input name) of a JAX case."""
    host_devices(max(world, 8))
    try:
        import jax
        from jax.sharding import NamedSharding, PartitionSpec
    except ImportError as exc:
        raise JaxError(f"a JAX case needs jax ({exc}); install shardproof[jax]") from None
    if len(jax.devices("cpu")) < world:
        raise JaxError(f"JAX has {len(jax.devices('cpu'))} host devices, the case needs {world}: call "
                       f"shardproof.frontends.jax_lower.host_devices({world}) before importing jax")
    axis = case.mesh_axis
    names = list(case.inputs)
    values = [np.asarray(case.inputs[n]) for n in names]
    specs = {n: (case.in_specs or {}).get(n, PartitionSpec()) for n in names}
    mesh = jax.make_mesh((world,), (axis,), devices=jax.devices("cpu")[:world])
    label = case.name or "case"
    try:
        seq_text = jax.jit(case.single).lower(*values).as_text(debug_info=True)
        shaped = [jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=NamedSharding(mesh, specs[n]))
                  for n, v in zip(names, values)]
        dist_text = jax.jit(case.distributed(mesh)).lower(*shaped).as_text(debug_info=True)
    except Exception as exc:  # the user's program does not trace or lower
        raise JaxError(f"lowering {label} failed: {type(exc).__name__}: {str(exc).splitlines()[0]}") from None
    seq = load_stablehlo_program(seq_text, 1, f"{label} (single device, StableHLO)")[0]
    graphs = load_stablehlo_program(dist_text, world, f"{label} (shard_map, StableHLO)")
    for g in [seq] + graphs:  # inputs by the case's names, in argument order
        if len(g.inputs) != len(names):
            raise JaxError(f"{label}: the lowered program takes {len(g.inputs)} inputs, the case gives {len(names)}")
        for node, name in zip(g.inputs, names):
            node.name = name
    relations = {n: spec_relation(specs[n], v.ndim, axis) for n, v in zip(names, values)}
    return seq, graphs, {n: v for n, v in zip(names, values)}, relations
