"""The small plan's step with all 4 layers (stage tail) and layer 3's gradients never all-reduced over dp."""
from llama_plan import SMALL, tail_case


def case(world_size=4):
    return tail_case(SMALL, world_size // SMALL.tp, "tail", 3)
