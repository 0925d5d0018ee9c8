"""The small plan's step with layer 0's gradients never all-reduced over dp (the step's tail)."""
from plan_small_step import case as step


def case(world_size=8):
    return step(world_size, "tail", 0)
