"""Megatron's f and g operators as methods, shared by the zoo's tensor-parallel models: the
forward cases use them as Megatron's forward does, and the training cases
(``train/mini_megatron.py``) override them with the autograd functions of the backward."""
import torch.distributed as dist
from torch import nn


class TensorParallel(nn.Module):
    def enter_tp(self, x):
        """Where the replicated activation enters the column-parallel layers (Megatron's f
        operator: identity here; a training variant all-reduces its gradient)."""
        return x

    def reduce_tp(self, y):
        """Sum the row-parallel partial outputs over the tensor-parallel ranks (Megatron's g)."""
        dist.all_reduce(y)
        return y
