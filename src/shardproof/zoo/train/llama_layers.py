"""Layer stacks of the zoo's Llama block on a tensor-parallel mesh, for block contracts
(issue 16) and the scaling benchmarks: the tp block on a shared Megatron mesh, a block with
one missing all_reduce (the MLP's g operator dropped: its output stays a partial sum over
tp), and the whole stack's forward and backward as one case (for labelling on gloo).
Not a zoo case itself (no ``case``): tests/cases/blocks_stack*.py are."""
import contextlib
import os
import sys

import torch
from torch import nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the zoo models

from llama_block import LlamaBlock, ParallelLlamaBlock, rope_tables  # noqa: E402
from mini_megatron import Mesh, MegatronTraining  # noqa: E402
from shardproof import Case  # noqa: E402
from shardproof.frontends.torch_blocks import BlockVJP  # noqa: E402

HIDDEN, HEADS, KV_HEADS, FFN = 32, 16, 8, 64
SEQ, ROWS = 4, 2


class TPLayer(ParallelLlamaBlock):
    """One tensor-parallel block on a shared mesh (Megatron's f/g on its tp group)."""

    def __init__(self, full, mesh):
        super().__init__(full, mesh.tp_rank, mesh.tp)
        self.mesh = mesh

    enter_tp = MegatronTraining.enter_tp
    reduce_tp = MegatronTraining.reduce_tp


class MlpWithoutReduce(TPLayer):
    """The bug: the MLP's row-parallel output is never all-reduced over tp."""

    def mlp(self, x):
        x = self.enter_tp(x)
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class QueryFromNextRank(TPLayer):
    """The bug: the same code, but wq loaded from the next rank's slice (a checkpoint loader's
    off-by-one): the graphs equal the correct block's, only the input relation differs."""

    def __init__(self, full, mesh):
        super().__init__(full, mesh)
        with torch.no_grad():
            self.wq.weight.copy_(full.wq.weight.chunk(mesh.tp, 0)[(mesh.tp_rank + 1) % mesh.tp])


BUGS = {"no-reduce": MlpWithoutReduce, "wrong-slice": QueryFromNextRank}

_COLUMN, _ROW, _WHOLE = "Shard(0)", "Shard(1)", "Replicate()"
TP_RELATIONS = {"x": _WHOLE, "g": _WHOLE, "block.attention_norm.weight": _WHOLE, "block.ffn_norm.weight": _WHOLE,
                "block.rope_cos": _WHOLE, "block.rope_sin": _WHOLE, "block.wq.weight": _COLUMN,
                "block.wk.weight": _COLUMN, "block.wv.weight": _COLUMN, "block.wo.weight": _ROW,
                "block.w1.weight": _COLUMN, "block.w3.weight": _COLUMN, "block.w2.weight": _ROW}
"""The plan's statement of how a tp rank's block inputs relate to the single-device block's
(TPLayer slices q/k/v and w1/w3 by rows, wo and w2 by columns; norms and RoPE tables whole;
the block's input and output gradient replicated, as Megatron's blocks take them): what
shardproof.blocks_shapes proves a block from where values are absent (fake tensors). With
KV heads fewer than ranks wk/wv are not Shard(0) (ranks share a head): not stated here."""


@contextlib.contextmanager
def rope_length(max_seq):
    """Blocks built inside get RoPE tables of `max_seq` positions (llama_block's default is 16):
    for sequences of a real model's length."""
    defaults = rope_tables.__defaults__
    rope_tables.__defaults__ = (defaults[0], max(max_seq, defaults[1]), *defaults[2:])
    try:
        yield
    finally:
        rope_tables.__defaults__ = defaults


def full_layers(n_layers, hidden=HIDDEN, heads=HEADS, kv_heads=KV_HEADS, ffn=FFN):
    return [LlamaBlock(hidden, heads, kv_heads, ffn) for _ in range(n_layers)]


def parallel_layer(buggy_layer=None, bug="no-reduce"):
    """``(layer, full block, rank, world) -> that rank's block`` on a tp-only mesh of `world`
    ranks; layer `buggy_layer` has the bug `bug` (:data:`BUGS`)."""
    def make(layer, full, rank, world, mesh=None):
        cls = BUGS[bug] if layer == buggy_layer else TPLayer
        return cls(full, mesh or Mesh(rank, world, world))
    return make


class Stack(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def stack_case(world_size=2, n_layers=8, buggy_layer=None, seed=0, bug="no-reduce") -> Case:
    """The whole stack, forward and backward (output and input gradient, both replicated
    over tp when correct), as one case: what the block contracts are about, run whole."""
    torch.manual_seed(seed)
    full = Stack(full_layers(n_layers))
    make = parallel_layer(buggy_layer, bug)

    def distributed(rank, world):
        mesh = Mesh(rank, world, world)
        return BlockVJP(Stack([make(i, b, rank, world, mesh) for i, b in enumerate(full.layers)]))
    inputs = {"x": torch.randn(ROWS, SEQ, HIDDEN), "g": torch.randn(ROWS, SEQ, HIDDEN)}
    return Case(single=BlockVJP(full), distributed=distributed, inputs=inputs, world_size=world_size,
                name=f"llama_layers_N{n_layers}" + (f"_{bug}{buggy_layer}" if buggy_layer is not None else ""),
                expect={"y": "Replicate()", "grad_x": "Replicate()"})
