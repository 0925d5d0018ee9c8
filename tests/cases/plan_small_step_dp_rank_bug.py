"""The small plan's step with dp rank 3 scaling its loss by 1.5 (one dp replica)."""
from plan_small_step import case as step


def case(world_size=8):
    return step(world_size, "dp-rank", 3)
