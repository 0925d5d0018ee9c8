"""Fixture: tp_mlp with a relation whose shapes cannot match (exit 3)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "src", "shardproof", "zoo"))
import tp_mlp  # noqa: E402


def case(world_size=2):
    c = tp_mlp.case(world_size)
    c.relations = {"fc1.weight": "Shard(1)"}  # fc1.weight is sharded along dim 0: shapes cannot match
    return c

