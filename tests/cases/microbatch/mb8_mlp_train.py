"""Correct: the tensor-parallel MLP's Megatron training step at dp2 (tp1) with 8 microbatches
of gradient accumulation (issue 16, microbatches flat in M: microbatches 2..7 run one program)."""
import os
import sys
from dataclasses import replace

from mini_megatron import regression_batch
from tp_mlp import HIDDEN
from tp_mlp_train import TRAIN, case as mlp_case

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "symmetry"))
from mb4_mlp_train import CountedMicrobatches  # noqa: E402  (the step with its microbatches counted)

WORLD_SIZES = (2,)
EIGHT_MICROBATCHES = replace(TRAIN, microbatches=8)
BATCH, SEQ = 16, 3  # 8 rows per dp rank: one per microbatch


def case(world_size: int = 2, model=CountedMicrobatches, name="mb8_mlp_train", train=EIGHT_MICROBATCHES):
    base = mlp_case(world_size, dp=world_size, model=model, train=train, name=name,
                    meta={"source": "issue 16: microbatches flat in M"})
    base.inputs = regression_batch(BATCH, SEQ, HIDDEN)
    return base
