"""4 Llama blocks on tp, forward and backward; layer 3 loads wq from the next rank's slice
(the same code as the other layers: only its weights' relation differs)."""
from llama_layers import stack_case


def case(world_size=2):
    return stack_case(world_size, 4, buggy_layer=3, bug="wrong-slice")
