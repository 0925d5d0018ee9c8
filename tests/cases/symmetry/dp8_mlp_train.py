"""Correct: the tensor-parallel MLP's Megatron training step (zoo/train/tp_mlp_train.py) at dp8
(tp1), one microbatch per step: every rank runs one program up to its dp group and its batch
slice, so its ranks form one class (issue 16, symmetry)."""
from dataclasses import replace

from tp_mlp_train import TRAIN, TrainParallelMLP, case as mlp_case

WORLD_SIZES = (8,)
ONE_MICROBATCH = replace(TRAIN, microbatches=1)


def case(world_size: int = 8, model=TrainParallelMLP, name="dp8_mlp_train"):
    return mlp_case(world_size, dp=world_size, model=model, train=ONE_MICROBATCH, name=name,
                    meta={"source": "issue 16: symmetry over dp ranks (correct)"})
