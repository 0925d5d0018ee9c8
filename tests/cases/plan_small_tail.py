"""The small plan's step with all 4 layers (stage tail of llama_plan.SMALL), correct."""
from llama_plan import SMALL, tail_case


def case(world_size=4):
    return tail_case(SMALL, world_size // SMALL.tp)
