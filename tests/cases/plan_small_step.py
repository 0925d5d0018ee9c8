"""The small Llama plan's training step (tests/test_e2e_plan.py): dp4 tp2 M4, one layer, at
the plan's reduced widths (llama_plan.SMALL); `bug`/`where` as llama_plan.stages."""
from llama_plan import SMALL, step_case


def case(world_size=8, bug=None, where=None):
    return step_case(SMALL, world_size // SMALL.tp, bug, where)
