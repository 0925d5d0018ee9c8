"""The 8-layer Llama training step with layer 5's input gradient never all-reduced over tp."""
from llama_step import step_case


def case(world_size=4):
    return step_case(8, dp=world_size // 2, tp=2, microbatches=2, buggy_layer=5)
