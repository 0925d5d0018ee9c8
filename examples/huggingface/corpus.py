"""The Hugging Face corpus: eight transformers architectures from tiny configs, each parallelized
by its own ``tp_plan`` through the public route of the Llama recipe (``hf_llama_tp.py``:
``from_pretrained(dir, distributed_config=DistributedConfig(tp_plan="auto", tp_size=world))``),
forward or a training step, eager or sdpa attention, at TP 2 or 4, correct or with one injected
plan bug. One parametrized module: ``make_case(arch, world_size, attn, mode, bug)``. The rank's
training step is transformers' own (``loss.backward()``, then ``.grad``: BackwardLogits), so the
hooks a plan puts on parameters run (Qwen3's and Gemma 3's q/k-norm gradient all-reduce).

    ARCH=gemma2 shardproof verify examples/huggingface/corpus.py -n 4
    ARCH=phi3 BUG=1 MODE=train ATTN=sdpa shardproof verify examples/huggingface/corpus.py

Sizes: hidden 64, 8 query heads of 8, 4 KV heads (GQA; GPT-NeoX has no GQA: 8/8), so every head
count divides TP 4; 2 layers (Gemma 2 and 3, Mistral: a sliding window of 4 over 8 tokens), vocab 128.
"""
import os
import sys
from typing import NamedTuple

import torch
import transformers
from torch.distributed.tensor import Partial, Shard
from transformers.distributed.tensor_parallel import ALL_PARALLEL_STYLES, RowwiseParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_llama_tp import BATCH, SEQ, Logits, checkpoint, tp_model  # noqa: E402
from hf_llama_tp_train import VOCAB, BackwardLogits, next_token_loss  # noqa: E402

from shardproof import Case, Train  # noqa: E402
from shardproof.frontends.torch_draws import redraw  # noqa: E402

WORLD_SIZES = (2, 4)

# A plan style a user registers (transformers' public ALL_PARALLEL_STYLES): rowwise, its output
# left Partial -- the reduction dropped. Gemma 2's bug puts it on o_proj (not an extra all_reduce:
# Gemma's sandwich RMSNorms are scale-invariant, so a doubled output barely changes the logits).
PARTIAL_ROWWISE = "rowwise_partial_output"
ALL_PARALLEL_STYLES.register(PARTIAL_ROWWISE, RowwiseParallel(input_layouts=Shard(-1), output_layouts=Partial()))
ATTNS = ("eager", "sdpa")
MODES = ("fw", "train")

_SIZES = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=8, max_position_embeddings=64, tie_word_embeddings=False)
_GQA = dict(num_key_value_heads=4)

class Arch(NamedTuple):
    config: str  # the transformers config class
    settings: dict  # over the shared tiny sizes
    bug: dict  # the injected bug: plan entries over the model's own plan
    why: str  # what the bug does
    hint: str  # a regex the finding's hint matches
    bug_line: str  # text of the source line the finding names


_REDUCED_TWICE = dict(hint="already complete on every rank: remove the extra all_reduce",
                      bug_line="output = output.redistribute(placements=[Replicate()])")
ARCHS = {
    "llama": Arch("LlamaConfig", _GQA, {"model.layers.*.mlp": "all_reduce"},
                  "the MLP's output, already all-reduced by down_proj (rowwise), all-reduced again", **_REDUCED_TWICE),
    "qwen2": Arch("Qwen2Config", _GQA, {"model.layers.*.mlp.down_proj": PARTIAL_ROWWISE},
                  "down_proj's partial sums never all-reduced (a rowwise style whose output stays Partial)",
                  hint="adds a term every rank holds whole to a partial sum",
                  bug_line="hidden_states = residual + hidden_states"),
    "mistral": Arch("MistralConfig", dict(_GQA, sliding_window=4),
                    {"model.layers.*.post_attention_layernorm": "all_reduce"},
                    "a replicated RMSNorm's output summed over the ranks", **_REDUCED_TWICE),
    "gemma2": Arch("Gemma2Config", dict(_GQA, head_dim=8, sliding_window=4, query_pre_attn_scalar=8,
                                        attn_logit_softcapping=50.0, final_logit_softcapping=30.0),
                   {"model.layers.*.self_attn.o_proj": PARTIAL_ROWWISE},
                   "o_proj's partial sums never all-reduced (a rowwise style whose output stays Partial)",
                   hint="partial sum that is never all-reduced", bug_line="x.pow(2).mean(-1, keepdim=True)"),
    "phi3": Arch("Phi3Config", dict(_GQA, pad_token_id=0),
                 {"model.layers.*.mlp.gate_up_proj": "colwise", "model.layers.*.mlp.down_proj": "rowwise"},
                 "the fused gate_up weight sharded as a plain colwise one: a rank's rows are gate rows only "
                 "(or up rows only), so chunk(2) pairs gate with gate",
                 hint="section/shard of the \\(fused\\) tensor",
                 bug_line="silu(input)"),  # the first divergent op: the activation (transformers' ACT2FN) of the
                                           # rows a rank takes for gate rows
    "qwen3": Arch("Qwen3Config", _GQA, {"model.layers.*.mlp.down_proj": PARTIAL_ROWWISE},
                  "down_proj's partial sums never all-reduced (a rowwise style whose output stays Partial)",
                  hint="adds a term every rank holds whole to a partial sum",
                  bug_line="hidden_states = residual + hidden_states"),
    "gemma3": Arch("Gemma3TextConfig", dict(_GQA, head_dim=8, sliding_window=4, query_pre_attn_scalar=8),
                   {"model.layers.*.self_attn.o_proj": PARTIAL_ROWWISE},
                   "o_proj's partial sums never all-reduced (a rowwise style whose output stays Partial)",
                   hint="partial sum that is never all-reduced", bug_line="x.pow(2).mean(-1, keepdim=True)"),
    "gpt_neox": Arch("GPTNeoXConfig", dict(num_key_value_heads=8, use_parallel_residual=True,
                                           rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                            "partial_rotary_factor": 0.5}),
                     {"gpt_neox.layers.*.mlp": "all_reduce"},
                     "the MLP's output, already all-reduced by dense_4h_to_h (rowwise), all-reduced again",
                     **_REDUCED_TWICE),
}


# The training step's own injected bug, for the plans whose backward has a collective of their own
# to get wrong: Qwen3's and Gemma 3's per-head q/k-norms are "replicated_with_grad_allreduce" (a
# post-accumulate-grad hook sums the weight's gradient, each rank's covering only its heads);
# "replicate" keeps the weight whole on every rank without the hook.
def _no_grad_allreduce(bug_line: str) -> Arch:
    return Arch("", {}, {f"model.layers.*.self_attn.{n}": "replicate" for n in ("q_norm", "k_norm")},
                "the q/k-norm weights replicated without their gradient all-reduce: each rank's "
                "gradient covers only its own heads", hint="still partial sums over the ranks", bug_line=bug_line)


GRAD_BUGS = {"qwen3": _no_grad_allreduce("return self.weight * hidden_states.to(input_dtype)"),
             "gemma3": _no_grad_allreduce("output = output * (1.0 + self.weight.float())")}

# configurations shardproof does not prove yet (the verdict is unknown, with the op named)
UNPROVED: dict = {}


def config(arch: str, attn: str):
    settings = dict(_SIZES, **ARCHS[arch].settings)
    if arch == "gpt_neox":
        settings.pop("num_key_value_heads")
    return getattr(transformers, ARCHS[arch].config)(attn_implementation=attn, **settings)


def single_model(arch: str, attn: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config(arch, attn), dtype=torch.float32)
    redraw(model, 0, buffers=False)  # distinct values: zero-initialised biases would fit any layout
    return model.train(False)


def case_name(arch: str, attn: str, mode: str, bug: bool) -> str:
    return f"hf_{arch}_{mode}_{attn}" + ("_bug" if bug else "")


def make_case(arch: str, world_size: int = 2, attn: str = "eager", mode: str = "fw", bug: bool = False) -> Case:
    """One configuration of the corpus (`mode`: "fw" the logits, "train" the loss and every
    gradient; `bug`: the architecture's injected plan entries, ``ARCHS[arch].bug``, in a training
    step ``GRAD_BUGS[arch].bug`` where it has one)."""
    spec = GRAD_BUGS.get(arch, ARCHS[arch]) if mode == "train" else ARCHS[arch]
    plan = spec.bug if bug else None
    full = single_model(arch, attn)
    path = checkpoint(full)
    torch.manual_seed(1)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    meta = {"source": "transformers tp_plan (DistributedConfig)", "arch": arch}
    if bug:
        meta.update(bug=f"wrong plan entries {spec.bug}: {spec.why}", hint=spec.hint, bug_line=spec.bug_line)
    common = dict(single=Logits(full), world_size=world_size, name=case_name(arch, attn, mode, bug), meta=meta,
                  description=f"HF {arch} (tiny, 2 layers) under its own tp_plan, {attn} attention, {mode}")
    if mode == "train":
        return Case(distributed=lambda rank, world: BackwardLogits(tp_model(path, world, attn, plan)),
                    inputs=dict(inputs, labels=torch.roll(ids, -1, 1)), train=Train(loss=next_token_loss), **common)
    return Case(distributed=lambda rank, world: Logits(tp_model(path, world, attn, plan)), inputs=inputs,
                expect={"out": "Replicate()"}, **common)


def case(world_size: int = 2, **config) -> Case:
    """The configuration named by `config` (make_case's keywords), else by $ARCH (default llama),
    $ATTN (eager), $MODE (fw), $BUG (0)."""
    env = os.environ
    config = dict(dict(arch=env.get("ARCH", "llama"), attn=env.get("ATTN", "eager"), mode=env.get("MODE", "fw"),
                       bug=env.get("BUG", "0") not in ("", "0")), **config)
    return make_case(world_size=world_size, **config)
