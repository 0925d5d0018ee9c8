"""Fixture: a relation naming a tensor the program does not have (exit 3)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "src", "shardproof", "zoo"))
import tp_mlp  # noqa: E402


def case(world_size=2):
    c = tp_mlp.case(world_size)
    c.relations = {"fc9.weight": "Shard(0)"}
    return c
