"""torchtitan's own Llama 3 (``torchtitan.models.llama3.Llama3Model``, torchtitan 0.3.0): grouped-
query attention (8 query heads, 4 KV heads, fused wqkv), SwiGLU, RMSNorm, complex RoPE
(``ComplexRoPE``: ``view_as_complex`` / ``view_as_real``), parallelized by torchtitan itself:
``set_llama3_sharding_config(config, enable_sp=True)`` (what its trainer calls for TP + SP) and
``model.parallelize(ParallelDims(tp=world, spmd_backend="partial_dtensor"))`` (DTensor); the
logits stay sharded over the vocabulary (loss_parallel). Its default ``spmd_types`` backend
(local tensors and plain collectives; ``TT_BACKEND=spmd_types``) built this way does not agree
with the single device on a real gloo group (max |diff| 2.56 on the logits), and shardproof
reports a violation for it; whether that is torchtitan or this construction is not settled.

    shardproof verify examples/corpus/torchtitan_llama.py --world-size 2   # exit 0: verified
    TT_BACKEND=spmd_types shardproof verify examples/corpus/torchtitan_llama.py   # see below

The CPU route (torch 2.13 CPU; pins in the ``corpus`` extra, with triton, spmd_types and tyro
installed ``--no-deps`` where needed):
- torchtitan 0.3.0 imports triton unconditionally (``torchtitan.distributed...kernels``); the
  triton wheel imports without a GPU;
- torchtitan's device type falls back to "cuda" when no accelerator is found, so its meshes
  are asked for on "cuda": while building, ``parallel_dims.device_type`` is "cpu";
- language models no longer offer sdpa as a backend name (flex and varlen need compiled
  kernels); each layer's inner attention is torchtitan's own ``ScaledDotProductAttention``
  (causal, the ``attention_masks=None`` path), which its Flux model builds the same way.

Reference: the same config unparallelized, same weights.

``make_case(world_size, bug=None)``; ``bug="norm_not_sequence_parallel"``: layer 0's
``ffn_norm`` gets the plan entry of a norm without sequence parallelism (a wrong plan entry);
torchtitan itself refuses it at run time (RMSNorm's output placements), and so does the capture.
"""
from __future__ import annotations

import contextlib
import copy
import os
import warnings

import torch

warnings.filterwarnings("ignore")
import torchtitan.distributed.parallel_dims as parallel_dims  # noqa: E402
from torchtitan.distributed import ParallelDims  # noqa: E402
from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm  # noqa: E402
from torchtitan.models.common.attention import ScaledDotProductAttention  # noqa: E402
from torchtitan.models.common.decoder_sharding import norm_config  # noqa: E402
from torchtitan.models.llama3 import Llama3Model, _build_llama3_layers  # noqa: E402
from torchtitan.models.llama3.sharding import set_llama3_sharding_config  # noqa: E402

from shardproof import Case  # noqa: E402

DIM, HEADS, KV_HEADS, FFN, VOCAB, LAYERS = 64, 8, 4, 128, 128, 2
BATCH, SEQ = 2, 8
WORLD_SIZES = (2, 4)


def config() -> Llama3Model.Config:
    cfg = Llama3Model.Config(
        dim=DIM, vocab_size=VOCAB,
        tok_embeddings=Embedding.Config(num_embeddings=VOCAB, embedding_dim=DIM),
        norm=RMSNorm.Config(normalized_shape=DIM), lm_head=Linear.Config(in_features=DIM, out_features=VOCAB),
        layers=_build_llama3_layers(fuse_qkv=True, n_layers=LAYERS, dim=DIM, n_heads=HEADS, n_kv_heads=KV_HEADS,
                                    hidden_dim=FFN, attn_backend="flex",
                                    rope=ComplexRoPE.Config(dim=DIM // HEADS, max_seq_len=4 * SEQ, theta=500000.0)))
    for layer in cfg.layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    return cfg


@contextlib.contextmanager
def cpu_meshes():
    saved = parallel_dims.device_type
    parallel_dims.device_type = "cpu"
    try:
        yield
    finally:
        parallel_dims.device_type = saved


def single_model() -> Llama3Model:
    torch.manual_seed(0)
    model = config().build()
    model.init_states()
    with torch.no_grad():  # non-trivial norm weights, so their relations are checked
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return model.train(False)


def rank_model(full: Llama3Model, world: int, bug=None) -> Llama3Model:
    cfg = config()
    set_llama3_sharding_config(cfg, enable_sp=True)
    if bug == "norm_not_sequence_parallel":
        cfg.layers[0].ffn_norm.sharding_config = norm_config(enable_sp=False)
    model = cfg.build()
    model.init_states()  # buffers (the RoPE table) as torchtitan fills them; then the reference's weights
    model.load_state_dict(copy.deepcopy(full.state_dict()))
    dims = ParallelDims(dp_replicate=1, dp_shard=1, cp=1, tp=world, pp=1, ep=1, world_size=world,
                        spmd_backend=os.environ.get("TT_BACKEND", "partial_dtensor"))
    with cpu_meshes():
        model.parallelize(dims)
    return model.train(False)


class Logits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, tokens):
        out = self.model(tokens)
        return out.to_local() if hasattr(out, "to_local") else out  # each rank's vocab chunk


def make_case(world_size: int = 2, bug: str | None = None) -> Case:
    full = single_model()
    torch.manual_seed(1)
    return Case(single=Logits(full), distributed=lambda rank, world: Logits(rank_model(full, world, bug)),
                inputs={"tokens": torch.randint(0, VOCAB, (BATCH, SEQ))}, world_size=world_size,
                name=f"torchtitan_llama{'_' + bug if bug else ''}",
                meta={"source": "torchtitan Llama3Model.parallelize (TP + SP, loss_parallel)", "bug": bug},
                description="torchtitan Llama 3 (GQA 8/4, SwiGLU, complex RoPE), its own TP + SP plan",
                expect={"out": "Shard(2)"})


def case(world_size: int = 2) -> Case:
    return make_case(world_size, os.environ.get("BUG") or None)
