"""Recipe: a Llama-style block parallelized the way torchtitan's ``parallelize`` (``apply_tp``)
plans it, with DTensor's ``parallelize_module``: tensor parallel attention and SwiGLU FFN,
sequence parallel RMSNorms, the block's input and output sharded on the sequence (Shard(1)).

    shardproof verify examples/torchtitan_style/llama_tp.py --world-size 2     # exit 0: verified

Why not the real package: torchtitan 0.3.0 (``pip install --no-deps torchtitan`` leaves torch
2.13 alone) cannot be imported on a CPU-only torch: ``torchtitan.models`` imports
``torchtitan.distributed.minimal_async_ep.kernels``, which imports ``triton`` unconditionally
(after ``spmd_types`` and ``tyro``), and triton is a GPU compiler, not a light dependency; its
0.3 model code also declares sharding through ``spmd_types`` configs rather than a
``parallelize_module`` plan. So this recipe writes the plan of torchtitan's classic ``apply_tp``
for one block (RoPE left out: torchtitan's complex RoPE is tracked separately).

``case(world_size, bug=None)``; ``bug="input_not_sharded"`` hands every rank the whole
sequence although the plan says the block's input is Shard(1) (the ranks all-gather w copies).
"""
import copy

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                               SequenceParallel, parallelize_module)

from shardproof import Case

DIM, N_HEADS, FFN, BATCH, SEQ = 16, 4, 32, 2, 8


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_dim = DIM // N_HEADS
        self.wq = nn.Linear(DIM, DIM, bias=False)
        self.wk = nn.Linear(DIM, DIM, bias=False)
        self.wv = nn.Linear(DIM, DIM, bias=False)
        self.wo = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x):
        b, s, _ = x.shape  # heads inferred with -1: each rank holds n_heads / tp of them
        q, k, v = (w(x).view(b, s, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(DIM, FFN, bias=False)
        self.w2 = nn.Linear(FFN, DIM, bias=False)
        self.w3 = nn.Linear(DIM, FFN, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm = nn.RMSNorm(DIM)
        self.attention = Attention()
        self.ffn_norm = nn.RMSNorm(DIM)
        self.feed_forward = FeedForward()

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


# torchtitan's apply_tp, per transformer block
BLOCK_PLAN = {
    "attention_norm": SequenceParallel(),
    "attention": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
    "attention.wq": ColwiseParallel(),
    "attention.wk": ColwiseParallel(),
    "attention.wv": ColwiseParallel(),
    "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
    "ffn_norm": SequenceParallel(),
    "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
    "feed_forward.w1": ColwiseParallel(),
    "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
    "feed_forward.w3": ColwiseParallel(),
}


def parallelize(full: TransformerBlock, world: int) -> TransformerBlock:
    mesh = init_device_mesh("cpu", (world,))
    return parallelize_module(copy.deepcopy(full), mesh, BLOCK_PLAN)


def case(world_size: int = 2, bug=None) -> Case:
    torch.manual_seed(0)
    full = TransformerBlock()
    with torch.no_grad():  # non-trivial norm weights, so their relations are checked
        full.attention_norm.weight.uniform_(0.5, 1.5)
        full.ffn_norm.weight.uniform_(0.5, 1.5)

    def sequence_shard(rank, world, inputs):
        return dict(inputs) if bug == "input_not_sharded" else {"x": inputs["x"].chunk(world, 1)[rank]}

    return Case(single=full, distributed=lambda rank, world: parallelize(full, world),
                inputs={"x": torch.randn(BATCH, SEQ, DIM)}, dist_inputs=sequence_shard,
                world_size=world_size, expect={"out": "Shard(1)"})
