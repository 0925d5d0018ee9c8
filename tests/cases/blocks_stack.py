"""Llama blocks on tp, forward and backward (tests/test_blocks.py): correct by default; with
``buggy_layer`` that layer has ``bug`` (llama_layers.BUGS: its MLP output never all-reduced,
or wq loaded from the next rank's slice)."""
from llama_layers import stack_case


def case(world_size=2, n_layers=8, buggy_layer=None, bug="no-reduce"):
    return stack_case(world_size, n_layers, buggy_layer, bug=bug)
