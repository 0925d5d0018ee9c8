"""Relations between a distributed tensor on each rank and a single-device tensor."""
from .spec import (Ignore, Interleaved, Mesh, Partial, Relation, RelationError, Replicate, Shard, Slices,
                   parse_relation)

__all__ = ["Ignore", "Interleaved", "Mesh", "Partial", "Relation", "RelationError", "Replicate", "Shard", "Slices",
           "parse_relation"]
