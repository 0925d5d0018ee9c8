"""A tiny Hugging Face Llama with grouped-query attention, parallelized by transformers' own
``tp_plan`` through its public route: ``from_pretrained(dir, distributed_config=
DistributedConfig(tp_plan="auto", tp_size=world))`` (transformers >= 5; the plan is the
model's ``base_model_tp_plan``: q/k/v/gate/up colwise, o/down rowwise, embedding rowwise).

shardproof builds each rank under its fake process group, which transformers finds already
initialised (``torch.distributed.is_initialized()``) and builds its device mesh on.

    shardproof verify examples/huggingface/hf_llama_tp.py               # eager attention
    ATTN=sdpa shardproof verify examples/huggingface/hf_llama_tp.py     # sdpa attention

World size 2 only: transformers' colwise k/v projections need the 2 KV heads to divide among the
ranks (at 4, PyTorch itself fails in ``modeling_llama``'s ``view``, and shardproof says so there).
"""
import atexit
import os
import shutil
import tempfile
import warnings

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, DistributedConfig, LlamaConfig

from shardproof import Case

BATCH, SEQ = 2, 8
WORLD_SIZES = (2,)


def config(attn: str) -> LlamaConfig:
    return LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                       tie_word_embeddings=False, attn_implementation=attn)


def single_model(attn: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config(attn), dtype=torch.float32)
    return model.train(False)


class Logits(torch.nn.Module):
    """The model's logits as the program's one output (``use_cache=False``: no KV cache), called
    as a tokenizer's output would call it: token ids and an attention (padding) mask."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


def checkpoint(full: torch.nn.Module) -> str:
    """`full` saved as a Hugging Face checkpoint directory, by every process (``save_pretrained``
    writes on rank 0 only once torch.distributed is up, as it is in a gloo run's ranks)."""
    path = tempfile.mkdtemp(prefix="shardproof-hf-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    full.config.save_pretrained(path)
    save_file({k: v.contiguous() for k, v in full.state_dict().items()}, os.path.join(path, "model.safetensors"),
              metadata={"format": "pt"})
    return path


def tp_model(path: str, world: int, attn: str, plan=None) -> torch.nn.Module:
    """The public route: rank r's shard of the checkpoint at `path`, as transformers parallelizes it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.float32, attn_implementation=attn,
            distributed_config=DistributedConfig(tp_plan=plan or "auto", tp_size=world))
    return model.train(False)


def make_case(world_size: int = 2, attn: str | None = None, plan: dict | None = None, name: str = "hf_llama_tp") -> Case:
    """`attn`: "eager" or "sdpa" (default: $ATTN, else eager); `plan`: entries that override
    the model's own plan (``DistributedConfig(tp_plan=...)`` keeps the rest)."""
    attn = attn or os.environ.get("ATTN", "eager")
    full = single_model(attn)
    path = checkpoint(full)
    torch.manual_seed(1)
    ids = torch.randint(0, 128, (BATCH, SEQ))
    return Case(single=Logits(full),
                distributed=lambda rank, world: Logits(tp_model(path, world, attn, plan)),
                inputs={"input_ids": ids, "attention_mask": torch.ones_like(ids)}, world_size=world_size,
                name=f"{name}_{attn}",
                meta={"source": "transformers tp_plan (DistributedConfig)"},
                description=f"HF Llama (GQA 4/2 heads, 2 layers) under its own tp_plan, {attn} attention",
                expect={"out": "Replicate()"})


def case(world_size: int = 2) -> Case:
    return make_case(world_size)
