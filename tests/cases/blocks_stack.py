"""8 Llama blocks on tp, forward and backward: correct (block contracts, tests/test_blocks.py)."""
from llama_layers import stack_case


def case(world_size=2):
    return stack_case(world_size, 8)
