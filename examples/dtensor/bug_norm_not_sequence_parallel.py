"""The DTensor recipe's training step with SequenceParallel left off the final norm: its gradients stay partial sums."""
from tiny_lm import case as _case


def case(world_size: int = 2):
    return _case(world_size, train=True, bug="norm_not_sequence_parallel")
