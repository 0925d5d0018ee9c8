"""JAX sequence-parallel MLP that all_gathers the token shards along the hidden axis."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from jax_models import sp_mlp_case  # noqa: E402


def case(world_size=4):
    return sp_mlp_case(world_size, bug="gather_axis")
