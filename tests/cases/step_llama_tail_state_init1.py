"""A 2-layer Llama training step whose layer 1 re-initialises its AdamW first moment to zeros:
bug ``state-init`` (zoo/train/llama_step.py)."""
from llama_step import step_case


def case(world_size=4):
    return step_case(2, dp=world_size // 2, tp=2, microbatches=2, buggy_layer=1, bug="state-init")
