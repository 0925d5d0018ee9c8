"""JAX tensor-parallel MLP whose row-parallel partial sums are never reduced (the psum is dropped)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from jax_models import tp_mlp_case  # noqa: E402


def case(world_size=4):
    c = tp_mlp_case(world_size, bug="no_psum")
    c.meta = {"kind": "partial-sum-never-reduced"}
    return c
