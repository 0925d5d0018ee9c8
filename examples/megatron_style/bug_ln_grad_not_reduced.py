"""The Megatron recipe with the sequence-parallel gradients (LayerNorm, fc2.bias) never all-reduced."""
from block import case as _case


def case(world_size: int = 2):
    return _case(world_size, bug="ln_grad_not_reduced")
