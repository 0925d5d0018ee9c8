"""The DTensor recipe's training step (logits all-gathered, plain cross entropy)."""
from tiny_lm import case as _case


def case(world_size: int = 2):
    return _case(world_size, train=True)
