"""The benchmark model of issue 16: a Llama training step built from the zoo's own blocks
(``zoo/llama_block.py`` + ``zoo/train/mini_megatron.py``), N layers on a dp x tp mesh, M
microbatches, AdamW and global-norm clipping. ``case(n_layers, dp, tp, microbatches)``."""
import os
import sys

import torch
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO = os.path.join(ROOT, "src", "shardproof", "zoo")
for _d in (ZOO, os.path.join(ZOO, "train")):
    if _d not in sys.path:
        sys.path.insert(0, _d)

from llama_layers import FFN, HEADS, HIDDEN, KV_HEADS, Stack, TPLayer, full_layers  # noqa: E402
from mini_megatron import Mesh, MegatronTraining, dp_shard, regression_batch, token_mean_loss  # noqa: E402
from shardproof import AdamW, Case, Train  # noqa: E402

SEQ, MB_ROWS = 4, 2  # each dp rank's microbatch holds MB_ROWS sequences
LLAMA3_8B = dict(hidden=4096, heads=32, kv_heads=8, ffn=14336)  # the real Llama-3-8B block shapes


class LlamaStack(Stack):
    def __init__(self, n_layers, hidden=HIDDEN, heads=HEADS, kv_heads=KV_HEADS, ffn=FFN):
        super().__init__(full_layers(n_layers, hidden, heads, kv_heads, ffn))


class ParallelLlamaStack(MegatronTraining, nn.Module):
    def __init__(self, full, rank, world, tp):
        nn.Module.__init__(self)
        self.mesh = Mesh(rank, world, tp)
        self.layers = nn.ModuleList(TPLayer(block, self.mesh) for block in full.layers)
        self.replicated = frozenset(f"layers.{i}.{norm}.weight" for i in range(len(full.layers))
                                    for norm in ("attention_norm", "ffn_norm"))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def case(n_layers=2, dp=2, tp=2, microbatches=2, shapes=None, seed=0) -> Case:
    torch.manual_seed(seed)
    shapes = shapes or {}
    full = LlamaStack(n_layers, **shapes)
    hidden = shapes.get("hidden", HIDDEN)
    train = Train(loss=token_mean_loss, optimizer=AdamW(lr=1e-2), microbatches=microbatches, grad_clip=0.5)
    return Case(single=full, distributed=lambda rank, world: ParallelLlamaStack(full, rank, world, tp),
                inputs=regression_batch(dp * microbatches * MB_ROWS, SEQ, hidden), dist_inputs=dp_shard(tp),
                world_size=dp * tp, train=train, name=f"llama_stack_N{n_layers}_dp{dp}_tp{tp}_M{microbatches}",
                meta={"source": "bench: Llama training step from the zoo's blocks"})
