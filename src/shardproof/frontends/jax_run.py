"""Run a live JAX case for real on host devices: the jitted single-device program, and the
``shard_map`` program over a 1-D mesh of `world` CPU devices; each rank's values are its
device's shards (the execution half of the confirmation of a proof)."""
from __future__ import annotations

import numpy as np


class JaxRunError(Exception):
    """The JAX programs could not be run here."""


def _drawn(values: dict, seed) -> dict:
    """The case's own inputs (seed None) or fresh ones: floats from a standard normal,
    integers and bools as given."""
    if seed is None:
        return dict(values)
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(v.shape).astype(v.dtype) if np.issubdtype(v.dtype, np.floating) else v
            for n, v in values.items()}


def _per_device(array, devices) -> list[np.ndarray]:
    """Each device's shard of a (possibly sharded) jax array, in mesh order."""
    shards = {s.device: np.asarray(s.data) for s in array.addressable_shards}
    return [shards[d] for d in devices]


def run_jax_case(case, world: int, seeds: list, output_names: list[str]) -> list[tuple]:
    """Per value set: (label, single-device inputs, outputs, per-rank inputs, per-rank
    outputs), outputs named `output_names` in the programs' output order."""
    try:
        import jax
        from jax.sharding import NamedSharding, PartitionSpec
        devices = jax.devices("cpu")[:world]
        if len(devices) < world:
            raise JaxRunError(f"JAX has {len(devices)} host devices, the case needs {world}")
        mesh = jax.make_mesh((world,), (case.mesh_axis,), devices=devices)
        order = list(mesh.devices.flat)
        names = list(case.inputs)
        own = {n: np.asarray(case.inputs[n]) for n in names}
        specs = {n: (case.in_specs or {}).get(n, PartitionSpec()) for n in names}
        single, distributed = jax.jit(case.single), jax.jit(case.distributed(mesh))
        runs = []
        for seed in seeds:
            values = _drawn(own, seed)
            s_out = jax.tree_util.tree_leaves(single(*[values[n] for n in names]))
            placed = [jax.device_put(values[n], NamedSharding(mesh, specs[n])) for n in names]
            d_out = jax.tree_util.tree_leaves(distributed(*placed))
            if len(s_out) != len(output_names) or len(d_out) != len(output_names):
                raise JaxRunError(f"the programs return {len(s_out)} and {len(d_out)} values, the graphs "
                                  f"{len(output_names)}")
            rank_in = [dict() for _ in range(world)]
            for n, a in zip(names, placed):
                for r, piece in enumerate(_per_device(a, order)):
                    rank_in[r][n] = piece
            rank_out = [dict() for _ in range(world)]
            for o, a in zip(output_names, d_out):
                for r, piece in enumerate(_per_device(a, order)):
                    rank_out[r][o] = piece
            runs.append(("the case's own values" if seed is None else f"draw {seed}", values,
                         {o: np.asarray(v) for o, v in zip(output_names, s_out)}, rank_in, rank_out))
        return runs
    except JaxRunError:
        raise
    except Exception as exc:  # noqa: BLE001  (the programs do not run here: not confirmed, said so)
        raise JaxRunError(f"running the JAX programs failed: {type(exc).__name__}: {exc}") from None
