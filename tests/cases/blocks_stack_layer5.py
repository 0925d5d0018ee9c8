"""8 Llama blocks on tp, forward and backward; layer 5's MLP output is never all-reduced."""
from llama_layers import stack_case


def case(world_size=2):
    return stack_case(world_size, 8, buggy_layer=5)
