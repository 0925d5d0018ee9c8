"""Twin of rope_pieces.py: wrong subgroup (its docstring)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rope_pieces import case as pieces_case  # noqa: E402

WORLD_SIZES = (4,)


def case(world_size: int = 4):
    return pieces_case(world_size, bug="wrong_subgroup")
