"""Recipe: a Megatron-style tensor + sequence parallel block, written by hand with explicit
``torch.distributed`` collectives inside autograd Functions (Megatron's f/g operators), and
one training step of it (forward, loss, backward, gradient reductions, SGD update).

    shardproof verify examples/megatron_style/block.py --world-size 4     # exit 0: verified

Block: x + fc2(gelu(fc1(layernorm(x)))), activations [seq, batch, hidden].
- tensor parallel: fc1 column parallel (rank r holds rows r of its weight), fc2 row parallel
  (columns r), so fc2's output is a partial sum;
- sequence parallel (default): each rank holds a sequence shard of x; LayerNorm runs on it,
  an all_gather along the sequence enters the TP region, a reduce_scatter leaves it (each the
  other's backward); the LayerNorm and fc2.bias gradients are then partial sums over ranks
  and must be all-reduced before the update (as Megatron does for sequence-parallel params);
- without sequence parallelism: f (identity forward, all_reduce of the gradient) enters the
  TP region, g (all_reduce forward, identity backward) leaves it.

``case(world_size, sequence_parallel=True, bug=None)``; ``bug="ln_grad_not_reduced"`` leaves
the all_reduce of the sequence-parallel gradients out (a real Megatron-LM class of bug).
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from shardproof import SGD, Case, Train

SEQ, BATCH, HIDDEN, FFN = 8, 2, 8, 32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(HIDDEN)
        self.fc1 = nn.Linear(HIDDEN, FFN)
        self.fc2 = nn.Linear(FFN, HIDDEN)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


def _all_reduce(t):
    t = t.clone()
    dist.all_reduce(t)
    return t


def _all_gather_seq(x):
    out = torch.empty((x.shape[0] * dist.get_world_size(),) + tuple(x.shape[1:]), dtype=x.dtype)
    dist.all_gather_single(out, x.contiguous())
    return out


def _reduce_scatter_seq(y):
    out = torch.empty((y.shape[0] // dist.get_world_size(),) + tuple(y.shape[1:]), dtype=y.dtype)
    dist.reduce_scatter_single(out, y.contiguous())
    return out


def _operator(name, forward, backward):
    """An autograd Function whose forward and backward are the given collectives."""
    return type(name, (torch.autograd.Function,), {"forward": staticmethod(lambda ctx, x: forward(x)),
                                                   "backward": staticmethod(lambda ctx, grad: backward(grad))})


# Megatron's f and g, and the sequence-parallel pair (each the other's backward)
CopyToTP = _operator("CopyToTP", lambda x: x.view_as(x), _all_reduce)  # f
ReduceFromTP = _operator("ReduceFromTP", _all_reduce, lambda grad: grad)  # g
GatherSeq = _operator("GatherSeq", _all_gather_seq, _reduce_scatter_seq)
ScatterSeq = _operator("ScatterSeq", _reduce_scatter_seq, _all_gather_seq)

# how rank r holds each parameter: its chunk r along this dim (absent: the whole tensor)
SHARD_DIMS = {"fc1.weight": 0, "fc1.bias": 0, "fc2.weight": 1}


class ParallelBlock(Block):
    def __init__(self, full: Block, rank: int, world: int, sequence_parallel: bool, bug=None):
        super().__init__()
        self.sp, self.bug = sequence_parallel, bug
        self.fc1 = nn.Linear(HIDDEN, FFN // world)
        self.fc2 = nn.Linear(FFN // world, HIDDEN)
        whole = full.state_dict()
        with torch.no_grad():
            for name, p in self.named_parameters():
                p.copy_(whole[name].chunk(world, SHARD_DIMS[name])[rank] if name in SHARD_DIMS else whole[name])

    def forward(self, x):
        h = self.ln(x)
        h = GatherSeq.apply(h) if self.sp else CopyToTP.apply(h)
        y = F.linear(F.gelu(self.fc1(h)), self.fc2.weight)  # a partial sum over ranks
        y = ScatterSeq.apply(y) if self.sp else ReduceFromTP.apply(y)
        return x + (y + self.fc2.bias)

    def train_step(self, inputs, state, train):
        count = inputs["target"].numel() * (dist.get_world_size() if self.sp else 1)  # the global count
        loss = ((self(inputs["x"]) - inputs["target"]) ** 2).sum() / count
        params = dict(self.named_parameters())
        grads = dict(zip(params, torch.autograd.grad(loss, list(params.values()))))
        if self.sp and self.bug != "ln_grad_not_reduced":  # rank-local sequence: partial sums
            for name in ("ln.weight", "ln.bias", "fc2.bias"):
                grads[name] = _all_reduce(grads[name])
        updated = {n: params[n] - train.optimizer.lr * grads[n] for n in params}
        return {"loss": _all_reduce(loss.detach()) if self.sp else loss.detach(), "grads": grads,
                "updated": updated}


def mean_squared_error(out, inputs):
    return ((out - inputs["target"]) ** 2).sum() / out.numel()


def case(world_size: int = 2, sequence_parallel: bool = True, bug=None) -> Case:
    torch.manual_seed(0)
    full = Block()
    inputs = {"x": torch.randn(SEQ, BATCH, HIDDEN), "target": torch.randn(SEQ, BATCH, HIDDEN)}

    def shard_sequence(rank, world, inputs):
        return {k: v.chunk(world, 0)[rank] for k, v in inputs.items()} if sequence_parallel else dict(inputs)

    return Case(single=full,
                distributed=lambda rank, world: ParallelBlock(full, rank, world, sequence_parallel, bug),
                inputs=inputs, dist_inputs=shard_sequence, world_size=world_size,
                train=Train(loss=mean_squared_error, optimizer=SGD(lr=0.1)))
