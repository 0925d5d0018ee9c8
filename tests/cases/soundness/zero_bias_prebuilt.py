"""Soundness class 5 fixture: a Megatron MLP whose distributed programs are built in
``case()`` (before shardproof redraws the weights) and whose fc1 bias is zero: any block of
it fits every rank, so its relation cannot be inferred by value (exit 3, with the
candidates and how to state it)."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import loader_mlp  # noqa: E402

WORLD_SIZES = (2,)


def case(world_size: int = 2):
    return loader_mlp.case(world_size, zero_bias=True, prebuilt=True)
