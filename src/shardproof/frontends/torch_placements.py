"""A returned DTensor states how each rank's local tensor relates to its full value: its
placements. :func:`stated_relation` reads them as a relation (``Partial("sum")``: the
local tensors sum to it, ``Replicate()``: each equals it, ``Shard(d)``: torch.chunk pieces
along d, DTensor's own uneven-shard rule), or None where no relation says it exactly
(strided shards, masked partials, a Partial on one axis of a multi-axis mesh): the
outputs are then judged as before, never by a guessed relation."""
from __future__ import annotations

from typing import Optional

from ..relations.spec import Mesh, Partial, Relation, Replicate, Shard

_REDUCE_OPS = {"sum": "sum", "avg": "avg", "max": "max", "min": "min"}


def _one(p) -> Optional[Relation]:
    from torch.distributed.tensor import Partial as TPartial, Replicate as TReplicate, Shard as TShard
    kind = type(p)
    if kind is TReplicate:
        return Replicate()
    if kind is TShard:  # exactly Shard: _StridedShard and others lay pieces out differently
        return Shard(int(p.dim))
    if kind is TPartial and str(p.reduce_op) in _REDUCE_OPS:
        return Partial(_REDUCE_OPS[str(p.reduce_op)])
    return None


def placement_specs(outputs: dict) -> dict:
    """Output name -> (device mesh, placements), for the outputs that are DTensors; read
    while tracing, turned into relations after it (:func:`stated_relations`), since the
    mesh's rank tensor must not be traced."""
    return {name: (v.device_mesh, tuple(v.placements)) for name, v in outputs.items()
            if hasattr(v, "to_local") and hasattr(v, "placements") and hasattr(v, "device_mesh")}


def stated_relation(mesh, placements) -> Optional[Relation]:
    """The relation a DTensor's placements on `mesh` state between its local tensor and
    its full value (None: placements no relation states exactly)."""
    import torch.distributed as dist
    ranks = mesh.mesh.flatten().tolist()
    if not dist.is_initialized() or ranks != list(range(dist.get_world_size())):
        return None  # a mesh over some ranks, or in another order: the world's ranks do not say it
    rels = [_one(p) for p in placements]
    if any(r is None for r in rels):
        return None
    if len(rels) == 1:
        return rels[0]
    if any(isinstance(r, Partial) for r in rels):
        return None
    shard_dims = [r.dim for r in rels if isinstance(r, Shard)]
    if len(shard_dims) != len(set(shard_dims)):
        return None  # two mesh axes sharding one dim: DTensor's nested chunks, not stated here
    return Mesh(tuple(int(s) for s in mesh.shape), tuple(rels))


def stated_relations(specs: dict) -> dict:
    """Output name -> the relation its DTensor's placements state (from :func:`placement_specs`)."""
    out = {}
    for name, (mesh, placements) in specs.items():
        rel = stated_relation(mesh, placements)
        if rel is not None:
            out[name] = rel
    return out
