"""The correct 2-layer Llama training step (dp2 tp2 M2, AdamW, clipping)."""
from llama_step import step_case


def case(world_size=4):
    return step_case(2, dp=world_size // 2, tp=2, microbatches=2)
