"""megatron-core's own GPT (``megatron.core.models.gpt.GPTModel``, local non-TE layer spec):
grouped-query attention (8 query heads, 4 KV groups), SwiGLU MLP, RMSNorm, RoPE, tensor +
sequence parallel, built on each rank by the library itself on shardproof's fake process group.

    shardproof verify examples/corpus/megatron_gpt.py --world-size 2    # exit 0: verified
    BUG=fc2_not_reduced shardproof verify examples/corpus/megatron_gpt.py   # violation

The CPU route (megatron-core 0.16.1, torch 2.13 CPU; the pins are in the ``corpus`` extra):
- ``parallel_state.initialize_model_parallel(tp, create_gloo_process_groups=False)`` on the
  process group shardproof set up (its gloo side groups cannot be built on a fake group);
- ``TransformerConfig(use_cpu_initialization=True, gradient_accumulation_fusion=False,
  masked_softmax_fusion=False, bias_dropout_fusion=False, apply_rope_fusion=False)``, dropouts 0;
- megatron-core asks ``torch.cuda.current_device()`` for the device of its buffers and forks a
  CUDA RNG tracker around attention dropout: while the model is built and run, the device is
  "cpu" and the fork a no-op (dropout probability 0, so no random numbers are drawn);
- the norms: megatron's torch norm wrapper refuses sequence parallelism (apex's fused norm is
  what marks the weights ``sequence_parallel``), so the spec gets a ``torch.nn.RMSNorm`` that
  marks them as apex's does.

Reference: the same library's GPTModel at TP 1 (no sequence parallelism), weights copied into
each rank's shards as megatron lays them out (qkv grouped by KV group, fc1 = [gate; up]).

``make_case(world_size, bug=None)``; ``bug="fc2_not_reduced"``: layer 0's row-parallel fc2
keeps its rank's partial sum and cuts the rank's sequence chunk out of it, without the
reduce-scatter (a dropped reduction).
"""
from __future__ import annotations

import contextlib
import os
import warnings

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.testing._internal.distributed.fake_pg import FakeStore

warnings.filterwarnings("ignore", message="Apex is not installed")
from megatron.core import parallel_state, tensor_parallel  # noqa: E402
from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding  # noqa: E402
from megatron.core.models.gpt import GPTModel  # noqa: E402
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec  # noqa: E402
from megatron.core.transformer.transformer_block import TransformerBlockSubmodules  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402
from megatron.core.utils import GlobalMemoryBuffer  # noqa: E402

from shardproof import Case  # noqa: E402

VOCAB, HIDDEN, HEADS, GROUPS, FFN, LAYERS = 128, 64, 8, 4, 128, 2
BATCH, SEQ = 2, 8
WORLD_SIZES = (2, 4)


@contextlib.contextmanager
def cpu_route():
    """megatron-core's CUDA calls, answered for the CPU (see the module docstring); its caches
    of tensors (the attention score buffer, the RoPE table) are fresh per call, so that none made
    in one trace is reused in another run."""
    tracker = tensor_parallel.get_cuda_rng_tracker()
    saved = torch.cuda.current_device, tracker.__dict__.get("fork")
    torch.cuda.current_device = lambda: "cpu"
    tracker.fork = lambda *args, **kwargs: contextlib.nullcontext()
    buffer = parallel_state._GLOBAL_MEMORY_BUFFER
    parallel_state._GLOBAL_MEMORY_BUFFER = GlobalMemoryBuffer()
    RotaryEmbedding.forward.cache_clear()
    try:
        yield
    finally:
        RotaryEmbedding.forward.cache_clear()
        parallel_state._GLOBAL_MEMORY_BUFFER = buffer
        torch.cuda.current_device = saved[0]
        if saved[1] is None:
            del tracker.fork
        else:
            tracker.fork = saved[1]


class Norm(torch.nn.RMSNorm):
    """RMSNorm as megatron's spec builds norms; marks its weight sequence-parallel as apex's does."""

    def __init__(self, config, hidden_size, eps=1e-5, **kwargs):
        super().__init__(hidden_size, eps=eps)
        self.weight.sequence_parallel = config.sequence_parallel


def build(tp: int) -> GPTModel:
    """megatron-core's GPT at tensor parallel size `tp` (sequence parallel when tp > 1), on the
    process group already initialised."""
    with contextlib.suppress(Exception):
        parallel_state.destroy_model_parallel()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp, create_gloo_process_groups=False)
    config = TransformerConfig(
        num_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS, num_query_groups=GROUPS,
        ffn_hidden_size=FFN, gated_linear_unit=True, activation_func=F.silu, normalization="RMSNorm",
        add_bias_linear=False, tensor_model_parallel_size=tp, sequence_parallel=tp > 1,
        use_cpu_initialization=True, gradient_accumulation_fusion=False, attention_dropout=0.0,
        hidden_dropout=0.0, bias_dropout_fusion=False, masked_softmax_fusion=False,
        apply_rope_fusion=False, persist_layer_norm=False, params_dtype=torch.float32)
    layer = get_gpt_layer_local_spec(normalization="RMSNorm")
    layer.submodules.input_layernorm = layer.submodules.pre_mlp_layernorm = Norm
    block = TransformerBlockSubmodules(layer_specs=[layer] * LAYERS, layer_norm=Norm)
    with cpu_route():
        return GPTModel(config, block, vocab_size=VOCAB, max_sequence_length=4 * SEQ,
                        position_embedding_type="rope")


def shard(name: str, full: torch.Tensor, local: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Rank `rank`'s piece of the TP-1 parameter `full`, laid out as megatron holds it."""
    if full.shape == local.shape:
        return full
    dim = next(d for d in range(full.dim()) if full.shape[d] != local.shape[d])
    if name.endswith("mlp.linear_fc1.weight"):  # [gate; up]: each rank holds [gate_r; up_r]
        return torch.cat([half.chunk(world, dim)[rank] for half in full.chunk(2, dim)], dim)
    return full.chunk(world, dim)[rank]  # qkv rows are grouped by KV group: a plain chunk


@contextlib.contextmanager
def tp1_state(single: bool):
    """The single-device model run where no process group is up (shardproof runs it after the
    ranks' fake groups are gone; megatron's layers then find no group at all): a one-process
    fake group for the call. The model's layers keep the TP-1 group they were built with."""
    if not single or dist.is_initialized():
        yield
        return
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


class Logits(torch.nn.Module):
    """The model's logits ([batch, seq, vocab / tp] on a rank: megatron's parallel output)."""

    def __init__(self, model, bug=None, single=False):
        super().__init__()
        self.model, self.single = model, single
        if bug == "fc2_not_reduced":
            drop_reduction(model.decoder.layers[0].mlp.linear_fc2)

    def forward(self, input_ids, position_ids, attention_mask):
        with tp1_state(self.single), cpu_route():
            return self.model(input_ids, position_ids, attention_mask)


def drop_reduction(linear) -> None:
    """The injected bug: a row-parallel linear's output is its rank's partial sum, cut to the
    rank's sequence chunk with no reduce-scatter."""
    forward = linear.forward
    world, rank = linear.tp_group.size(), linear.tp_group.rank()

    def without_reduce_scatter(x):
        linear.explicit_expert_comm = True  # megatron then returns the partial sum as is
        out, bias = forward(x)
        return out.chunk(world, 0)[rank], bias

    linear.forward = without_reduce_scatter


def single_model() -> GPTModel:
    """The TP-1 reference, built on the process group that is up (a real gloo run's) or on a
    one-process fake one, let go once built (its layers keep their TP-1 group)."""
    owns_group = not dist.is_initialized()
    if owns_group:
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=1)
    torch.manual_seed(0)
    try:
        model = build(1)
    finally:
        if owns_group:
            parallel_state.destroy_model_parallel()
            dist.destroy_process_group()
    with torch.no_grad():  # non-trivial norm weights, so their relations are checked
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    return model.train(False)


def rank_model(full: GPTModel, rank: int, world: int, bug=None) -> Logits:
    model = build(world)
    whole = full.state_dict()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(shard(name, whole[name], p, rank, world))
    return Logits(model.train(False), bug)


def make_case(world_size: int = 2, bug: str | None = None) -> Case:
    full = single_model()
    torch.manual_seed(1)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    inputs = {"input_ids": ids, "position_ids": torch.arange(SEQ).expand(BATCH, SEQ).contiguous(),
              "attention_mask": torch.triu(torch.ones(1, 1, SEQ, SEQ, dtype=torch.bool), 1)}
    return Case(single=Logits(full, single=True), distributed=lambda rank, world: rank_model(full, rank, world, bug),
                inputs=inputs, world_size=world_size, name=f"megatron_gpt{'_' + bug if bug else ''}",
                meta={"source": "megatron-core GPTModel (local spec), TP + SP", "bug": bug},
                description="megatron-core GPT (GQA 8/4, SwiGLU, RMSNorm, RoPE), TP + SP",
                expect={"out": "Shard(2)"})


def case(world_size: int = 2) -> Case:
    return make_case(world_size, os.environ.get("BUG") or None)
