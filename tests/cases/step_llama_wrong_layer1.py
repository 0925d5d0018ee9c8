"""A 2-layer Llama training step whose layer 1 is sharded from layer 0's weights on every rank:
bug ``wrong-layer`` (zoo/train/llama_step.py)."""
from llama_step import step_case


def case(world_size=4):
    return step_case(2, dp=world_size // 2, tp=2, microbatches=2, buggy_layer=1, bug="wrong-layer")
