"""A tiny Hugging Face Llama with grouped-query attention, parallelized by transformers' own
``tp_plan`` through its public route: ``from_pretrained(dir, distributed_config=
DistributedConfig(tp_plan="auto", tp_size=world))`` (transformers >= 5; the plan is the
model's ``base_model_tp_plan``: q/k/v/gate/up colwise, o/down rowwise, embedding rowwise).

shardproof builds each rank under its fake process group, which transformers finds already
initialised (``torch.distributed.is_initialized()``) and builds its device mesh on.

    shardproof verify examples/huggingface/hf_llama_tp.py               # eager attention
    ATTN=sdpa shardproof verify examples/huggingface/hf_llama_tp.py     # sdpa attention
"""
import os
import tempfile
import warnings

import torch
from transformers import AutoModelForCausalLM, LlamaConfig
from transformers.distributed import DistributedConfig

from shardproof import Case

BATCH, SEQ = 2, 8


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


def tp_model(checkpoint: str, world: int, attn: str, plan=None) -> torch.nn.Module:
    """The public route: rank r's shard of the saved model, as transformers parallelizes it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_pretrained(
            checkpoint, dtype=torch.float32, attn_implementation=attn,
            distributed_config=DistributedConfig(tp_plan=plan or "auto", tp_size=world))
    return model.train(False)


def make_case(world_size: int = 2, attn: str | None = None, plan: dict | None = None, name: str = "hf_llama_tp") -> Case:
    attn = attn or os.environ.get("ATTN", "eager")
    full = single_model(attn)
    checkpoint = tempfile.mkdtemp(prefix="shardproof-hf-")
    full.save_pretrained(checkpoint)
    torch.manual_seed(1)
    ids = torch.randint(0, 128, (BATCH, SEQ))
    return Case(single=Logits(full),
                distributed=lambda rank, world: Logits(tp_model(checkpoint, world, attn, plan)),
                inputs={"input_ids": ids, "attention_mask": torch.ones_like(ids)}, world_size=world_size, name=f"{name}_{attn}",
                meta={"source": "transformers tp_plan (DistributedConfig)"},
                description=f"HF Llama (GQA 4/2 heads, 2 layers) under its own tp_plan, {attn} attention",
                expect={"out": "Replicate()"})


def case(world_size: int = 2) -> Case:
    return make_case(world_size)
