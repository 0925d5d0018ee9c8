"""The Llama-3-405B-like training plan of issue 16 as stages of ``shardproof.plan_e2e`` (one
end-to-end verification), and the same composition at small sizes for the tests.

    report = verify_llama_plan(PlanSpec())                      # the 405B-like plan
    report = verify_llama_plan(SMALL, bug="layer", where=2)     # a bug in layer 2, located

Stages (each states what it proved where; see ``report.plan``):

1. ``layers``: the plan's `layers` Llama blocks (forward and backward on one tp group) at the
   **real sizes** on fake tensors, from the plan's stated relations (``TP_RELATIONS``): each
   layer screened at the real sizes, one proof per distinct block, contracts chained;
   **confirmed by execution at reduced widths** (same heads, KV heads, tp and code; smaller head
   dim and FFN), after checking both stacks are the same program modulo sizes
   (``blocks_shapes.verify_blocks_at_shapes``).
2. ``step``: the training step (token-mean loss, accumulation over the plan's microbatches, the
   dp gradient all_reduce, tp reductions, global-norm clipping, AdamW) at the plan's **dp, tp
   and microbatches** (every rank: rank classes, derived microbatch loops) at the **reduced
   widths** with `step_layers` layers, proved by the engine; confirmed by execution on gloo at
   the plan's world, or at dp `confirm_dp` where the plan's world is too many processes.
3. ``tail`` (when `tail_dp`): the training step with **all** `layers` layers at dp `tail_dp`,
   the plan's tp and `tail_microbatches` microbatches (default the plan's), reduced widths, by
   ``step_blocks.verify_step`` (each distinct layer one proved contract, every parameter's
   update one opaque call proved once per class: every layer's parameters reduced, clipped and
   updated); proved at dp `tail_dp` (and M `tail_microbatches`), not the plan's (said in its
   ``proved``); confirmed on gloo at dp `tail_dp`, with `tail_confirm_layers` layers where set
   (the same proof repeated for that shorter step first: said in ``confirmed``, in the
   confirmation's detail and in ``not_covered``). Where the contracts do not prove the tail,
   ``verify_step`` falls back to the full trace (``report.blocks["fallback"]``; the stage's
   ``machinery`` then has no ``update_classes``).

Bugs (``bug``, ``where``): ``layer`` (layer `where`'s MLP output never all-reduced over tp: in
stage 1, at the real sizes), ``tail`` (layer `where`'s parameter gradients never all-reduced
over dp: the step's tail, stage 2; stage 3 for a layer stage 2 does not trace), ``dp-rank`` (dp rank `where` scales its loss by 1.5: one dp
replica, stage 2)."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import llama_layers as L  # noqa: E402
import llama_step  # noqa: E402
from shardproof.plan_e2e import Stage, step_stage, verify_plan  # noqa: E402

REAL_405B = dict(hidden=16384, heads=128, kv_heads=8, ffn=53248)
REDUCED_405B = dict(hidden=512, heads=128, kv_heads=8, ffn=64)  # head_dim 4: the same heads, KV heads and tp
ROPE_405B = 131072  # Llama-3.1's RoPE table; a training sequence reads its first `seq` rows
VOCAB_405B = 128256


@dataclass
class PlanSpec:
    layers: int = 126
    dp: int = 64
    tp: int = 8
    microbatches: int = 16
    real: dict = field(default_factory=lambda: dict(REAL_405B))
    seq: int = 8192
    rope: int = ROPE_405B
    reduced: dict = field(default_factory=lambda: dict(REDUCED_405B))
    reduced_seq: int = 4
    step_layers: int = 1
    confirm_dp: int | None = 2  # the step executed on gloo at this dp (None: at the plan's dp)
    tail_dp: int | None = None  # stage tail: the step with all `layers` layers at this dp (None: no such stage;
    # at 126 layers, dp2 M2, confirmed with 2 layers: 313 CPU s, 9.65 GB (bench/README.md section 15); with the
    # other stages' 278 CPU s over the plan's 8-min budget, so off by default)
    tail_microbatches: int | None = 2  # stage tail's microbatches (None: the plan's; M16 cost 5.4 CPU s a layer)
    tail_confirm_layers: int | None = 2  # stage tail executed on gloo with this many layers (None: all)
    rows: int = 1
    name: str = "llama405b-like plan"

    @property
    def tail_m(self) -> int:
        return self.tail_microbatches or self.microbatches

    def describe(self, sizes: dict, seq: int) -> str:
        return (f"hidden {sizes['hidden']}, {sizes['heads']} heads, {sizes['kv_heads']} KV heads, ffn {sizes['ffn']}, "
                f"sequence {seq}")


SMALL = PlanSpec(layers=4, dp=4, tp=2, microbatches=4, real=dict(hidden=128, heads=8, kv_heads=4, ffn=256), seq=16,
                 rope=64, reduced=dict(hidden=32, heads=8, kv_heads=4, ffn=16), step_layers=1, confirm_dp=2,
                 tail_dp=2, tail_microbatches=2, tail_confirm_layers=2, name="small llama plan")
"""The same composition at small sizes (tests): 4 layers, dp4 tp2 M4, real-like head dim 16."""


def layers_stage(spec: PlanSpec, buggy_layer: int | None = None):
    """Stage 1's report: the stack proved at the real sizes, confirmed at reduced widths."""
    from shardproof.blocks_shapes import verify_blocks_at_shapes
    mode = FakeTensorMode()
    with L.rope_length(max(spec.seq, spec.rope)):  # every block's table, the ranks' (built later) too
        with mode:
            real = L.full_layers(spec.layers, **spec.real)
            real_data = (torch.randn(spec.rows, spec.seq, spec.real["hidden"]),
                         torch.randn(spec.rows, spec.seq, spec.real["hidden"]))
        torch.manual_seed(0)
        reduced = L.full_layers(spec.layers, **spec.reduced)
        reduced_data = (torch.randn(spec.rows, spec.reduced_seq, spec.reduced["hidden"]),
                        torch.randn(spec.rows, spec.reduced_seq, spec.reduced["hidden"]))
        sizes = (spec.describe(spec.real, spec.seq), spec.describe(spec.reduced, spec.reduced_seq))
        return verify_blocks_at_shapes(real, reduced, L.parallel_layer(buggy_layer), real_data, reduced_data, spec.tp,
                                       L.TP_RELATIONS, f"{spec.name}: {spec.layers}-layer stack", mode,
                                       confirm_draws=0, sizes=sizes)


def step_case(spec: PlanSpec, dp: int, bug: str | None = None, where: int | None = None):
    kind = {"tail": "no-dp-reduce", "dp-rank": "dp-rank-loss"}.get(bug)
    return llama_step.step_case(spec.step_layers, dp, spec.tp, spec.microbatches, buggy_layer=where if kind else None,
                                bug=kind or "no-grad-reduce", shapes=spec.reduced)


def tail_stage(spec: PlanSpec, bug: str | None = None, where: int | None = None):
    """Stage 3's report: the step with all the plan's layers at dp `tail_dp` and `tail_m`
    microbatches, by step contracts (``step_blocks.verify_step``: each distinct layer one proved
    contract, every parameter's update one opaque call proved once per class). Confirmed by
    running the real step on gloo: the same step when `tail_confirm_layers` is None, else (the
    proof left unconfirmed) the same step with that many layers, verified the same way and
    executed (``plan_e2e.step_stage``; the detail names both programs)."""
    from dataclasses import replace
    from shardproof.plan_e2e import step_stage
    from shardproof.step_blocks import verify_step
    case = tail_case(spec, spec.tail_dp, bug, where)
    few = spec.tail_confirm_layers
    small = tail_case(spec, spec.tail_dp, bug, where, layers=few) if few and few < spec.layers else None
    report = step_stage(case, small, confirm_draws=0, verify=lambda c, draws: verify_step(c, confirm_draws=draws))
    if report.confirmation is not None:  # the world it ran at is not the plan's: said
        ran = report.confirmation.detail if small else f"at world {case.world_size} ({case.name})"
        report.confirmation = replace(report.confirmation, detail=f"{ran}; the plan's world is {spec.dp * spec.tp}")
    return report


def tail_case(spec: PlanSpec, dp: int, bug: str | None = None, where: int | None = None, layers: int | None = None):
    """The step of stage tail: `layers` (default all `spec.layers`) layers, at dp `dp` and
    `tail_m` microbatches (a dp-rank bug beyond `dp`, or a layer bug beyond `layers`: none)."""
    kind = {"tail": "no-dp-reduce", "dp-rank": "dp-rank-loss"}.get(bug)
    layers = layers or spec.layers
    inside = where is not None and (where < dp if bug == "dp-rank" else where < layers)
    return llama_step.step_case(layers, dp, spec.tp, spec.tail_m,
                                buggy_layer=where if kind and inside else None,
                                bug=kind or "no-grad-reduce", shapes=spec.reduced)


def stages(spec: PlanSpec, bug: str | None = None, where: int | None = None) -> list[Stage]:
    if bug not in (None, "layer", "tail", "dp-rank"):
        raise ValueError(f"unknown bug {bug!r}")
    confirm_dp = spec.confirm_dp if spec.confirm_dp and spec.confirm_dp < spec.dp else None
    small = spec.describe(spec.reduced, llama_step.SEQ)
    step_confirmed = (f"by execution on gloo at dp{confirm_dp} tp{spec.tp} M{spec.microbatches} ({small}): "
                      f"{confirm_dp * spec.tp} processes, not the plan's {spec.dp * spec.tp}" if confirm_dp else
                      f"by execution on gloo at the plan's world ({spec.dp * spec.tp} processes), {small}")

    def stack_confirmed(report):
        shapes = (report.blocks or {}).get("shapes", {})
        return (f"by execution at reduced widths ({spec.describe(spec.reduced, spec.reduced_seq)}), the same program "
                f"modulo sizes: {'matched' if shapes.get('matched') else 'not matched'}")

    def run_step():
        case = step_case(spec, spec.dp, bug, where)
        return step_stage(case, step_case(spec, confirm_dp, bug, where) if confirm_dp else None, confirm_draws=0)
    return [
        Stage("layers", f"the {spec.layers} Llama blocks, forward and backward on one tp{spec.tp} group, chained",
              f"real sizes ({spec.describe(spec.real, spec.seq)}), tp{spec.tp}, fake tensors, stated relations",
              "at reduced widths", lambda: layers_stage(spec, where if bug == "layer" else None),
              confirmed_of=stack_confirmed, extra={"layers": spec.layers}),
        Stage("step", f"the training step's tail: token-mean loss, {spec.microbatches} microbatches accumulated, "
                      f"the dp{spec.dp} and tp{spec.tp} gradient reductions, global-norm clipping, AdamW "
                      f"(with {spec.step_layers} layer(s) traced in it)",
              f"dp{spec.dp} tp{spec.tp} M{spec.microbatches}, every rank (rank classes, derived microbatch loops), "
              f"at reduced widths ({small})", step_confirmed, run_step),
    ] + ([Stage("tail", f"the training step with all {spec.layers} layers: every layer's parameters reduced over dp, "
                        f"in the clipping norm and updated by AdamW (one opaque update per parameter class, each "
                        f"class proved once; each distinct layer one proved contract)",
                f"dp{spec.tail_dp} tp{spec.tp} M{spec.tail_m} ({_not_plans(spec)}), every rank, "
                f"all {spec.layers} layers, at reduced widths ({small})", _tail_confirmed(spec, small),
                lambda: tail_stage(spec, bug, where), extra={"layers": spec.layers})] if spec.tail_dp else [])


def _not_plans(spec: PlanSpec) -> str:
    return "not the plan's " + " ".join([f"dp{spec.dp}"] + ([f"M{spec.microbatches}"] if spec.tail_m !=
                                                             spec.microbatches else []))


def _tail_confirmed(spec: PlanSpec, small: str) -> str:
    few = spec.tail_confirm_layers if spec.tail_confirm_layers and spec.tail_confirm_layers < spec.layers else None
    return (f"by execution on gloo at dp{spec.tail_dp} tp{spec.tp} M{spec.tail_m} ({small}): "
            f"{spec.tail_dp * spec.tp} processes" + (f", the step with {few} of the {spec.layers} layers (the same "
                                                      f"proof repeated for it first)" if few else ""))


def not_covered(spec: PlanSpec) -> list[str]:
    return [f"the embedding and the output head (vocab {VOCAB_405B if spec.real == REAL_405B else '-'}): not in "
            f"this plan's model (the step's loss is a token-mean regression on the last layer's output)",
            (f"the step's tail at the real sizes: proved at reduced widths only "
             f"({spec.describe(spec.reduced, llama_step.SEQ)}); "
             f"over all {spec.layers} layers at dp{spec.tail_dp} M{spec.tail_m} (stage tail), at the plan's "
             f"dp{spec.dp} M{spec.microbatches} with {spec.step_layers} layer(s) (stage step): all {spec.layers} "
             f"layers at dp{spec.dp}" + (f" M{spec.microbatches}" if spec.tail_m != spec.microbatches else "") +
             " together are not proved" + (f"; stage tail's proof over all {spec.layers} layers is confirmed by "
                                           f"execution with {spec.tail_confirm_layers} layers only"
                                           if spec.tail_confirm_layers and spec.tail_confirm_layers < spec.layers
                                           else "")
             if spec.tail_dp else
             f"the step's tail at the real sizes and over all {spec.layers} layers: proved at reduced widths with "
             f"{spec.step_layers} layer(s); the per-parameter tail ops of the other layers are the same code "
             f"(not proved per layer here)"),
            "the stack composed with the step's tail at the real sizes (the contracts of stage 1 are not chained "
            "into stage 2's step: stage 2 traces its layer(s) whole)"]


def verify_llama_plan(spec: PlanSpec = PlanSpec(), bug: str | None = None, where: int | None = None, on_stage=None):
    return verify_plan(stages(spec, bug, where), name=spec.name, world_size=spec.dp * spec.tp,
                       not_covered=not_covered(spec), on_stage=on_stage)
