"""Recipe: a small language model parallelized with DTensor's ``parallelize_module``:
ColwiseParallel / RowwiseParallel for the MLP, SequenceParallel for the norms, and the
vocab-parallel cross entropy of ``loss_parallel()`` on the Shard(-1) logits.

    shardproof verify examples/dtensor/tiny_lm.py --world-size 4     # the forward (the loss)

- The mesh: ``init_device_mesh("cpu", (world,))``, called inside ``distributed(rank, world)``.
  No ``dist.init_process_group`` is needed: shardproof traces every rank under PyTorch's fake
  process group, initialized for each rank before that rank's program is built (and
  ``init_device_mesh`` uses it); on a real cluster the same code runs under torchrun. Build
  the mesh there, not in ``case()``: outside ``distributed`` there is no process group, and
  ``init_device_mesh`` fails ("environment variable RANK expected, but not set").
- ``inputs`` keys become keyword arguments of ``forward``: ``{"tokens": ..., "targets": ...}``
  calls ``model(tokens=..., targets=...)`` on the single device and on every rank
  (``dist_inputs`` could hand each rank its own part; here every rank takes the whole batch).
- Forward vs training step: this case checks the forward (the loss it returns).
  ``case(train=True)`` checks one training step instead: ``train_step`` takes the gradients
  of the DTensor parameters (DTensor's backward collectives included) and applies SGD; the
  logits are then all-gathered (``vocab_parallel_loss=False``) unless asked otherwise. The
  step lays each DTensor gradient out as its parameter (``redistribute``): DTensor hands back
  the norms' gradients as ``Partial("sum")`` and the embedding's as ``Replicate()``, whose
  local tensors are not the rank's shard (returned as they are, shardproof would compare
  those local tensors and report a violation the program does not have).
  Under ``loss_parallel`` the step is unknown today (the vocab mask's backward, aten._to_copy).
- Tokens are one flat sequence: ``cross_entropy`` of ``logits.flatten(0, 1)`` stops at
  ``aten.gather``, of ``logits.transpose(1, 2)`` at ``nll_loss2d_forward`` (unknown).

``case(world_size, train=False, bug=None, vocab_parallel_loss=None)``;
``bug="norm_not_sequence_parallel"`` drops SequenceParallel from the final norm. The forward
stays right (a LayerNorm per token on each rank's sequence shard), but the norm's parameters
are then plain tensors used on a shard: their gradients are partial sums nobody reduces
(``examples/dtensor/bug_norm_not_sequence_parallel.py``: the training step).
"""
import copy

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                               loss_parallel, parallelize_module)

from shardproof import SGD, Case, Train

VOCAB, HIDDEN, FFN, SEQ = 32, 8, 32, 16


def whole(t):
    """A DTensor's full value (a plain tensor as it is)."""
    return t.full_tensor() if isinstance(t, DTensor) else t


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.norm1 = nn.LayerNorm(HIDDEN)
        self.w1 = nn.Linear(HIDDEN, FFN)
        self.w2 = nn.Linear(FFN, HIDDEN)
        self.norm2 = nn.LayerNorm(HIDDEN)
        self.output = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, tokens, targets):
        return whole(self.loss(tokens, targets))

    def loss(self, tokens, targets):
        h = self.embed(tokens)
        h = h + self.w2(F.gelu(self.w1(self.norm1(h))))
        logits = self.output(self.norm2(h))
        with loss_parallel():  # a no-op on plain tensors
            return F.cross_entropy(logits, targets)

    def train_step(self, inputs, state, train):
        params = dict(self.named_parameters())
        loss = self.loss(**inputs)  # a DTensor on the ranks
        with loss_parallel():  # the loss's backward is vocab-parallel too
            grads = dict(zip(params, torch.autograd.grad(loss, list(params.values()))))
        # A DTensor gradient may come back in another layout than its parameter (Partial("sum")
        # for the sequence-parallel norms, Replicate for the embedding): lay it out as the
        # parameter, as the optimizer would; its local tensor is then the rank's shard.
        grads = {n: g.redistribute(g.device_mesh, params[n].placements) if isinstance(g, DTensor) else g
                 for n, g in grads.items()}
        updated = {n: params[n] - train.optimizer.lr * grads[n] for n in params}
        return {"loss": whole(loss).detach(), "grads": grads, "updated": updated}


def plan(bug=None, vocab_parallel_loss=True) -> dict:
    output = (ColwiseParallel(input_layouts=Shard(0), use_local_output=False) if vocab_parallel_loss  # Shard(-1) logits
              else ColwiseParallel(input_layouts=Shard(0), output_layouts=Replicate()))  # logits all-gathered
    return {
        "embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0)),  # vocab-parallel
        "norm1": SequenceParallel(sequence_dim=0),
        "w1": ColwiseParallel(input_layouts=Shard(0)),  # all_gather the sequence
        "w2": RowwiseParallel(output_layouts=Shard(0)),  # reduce_scatter onto the sequence
        "norm2": SequenceParallel(sequence_dim=0) if bug != "norm_not_sequence_parallel" else None,
        "output": output,
    }


def parallelize(full: TinyLM, world: int, bug=None, vocab_parallel_loss=True) -> TinyLM:
    mesh = init_device_mesh("cpu", (world,))
    return parallelize_module(copy.deepcopy(full), mesh, {k: v for k, v in plan(bug, vocab_parallel_loss).items() if v})


def case(world_size: int = 2, train: bool = False, bug=None, vocab_parallel_loss=None) -> Case:
    vocab_parallel_loss = not train if vocab_parallel_loss is None else vocab_parallel_loss
    torch.manual_seed(0)
    full = TinyLM()
    inputs = {"tokens": torch.randint(0, VOCAB, (SEQ,)), "targets": torch.randint(0, VOCAB, (SEQ,))}
    return Case(single=full, distributed=lambda rank, world: parallelize(full, world, bug, vocab_parallel_loss),
                inputs=inputs, world_size=world_size, expect=None if train else {"out": "Replicate()"},
                train=Train(loss="out", optimizer=SGD(lr=0.1)) if train else None)
