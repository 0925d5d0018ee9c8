"""A ``torch.distributed.pipelining`` training step whose stages are built without static
shapes (``PipelineStage(submod, stage, n_stages, device)``: no ``input_args``/``output_args``),
so the schedule infers them at its first step, each stage receiving the previous stage's
output metadata (PyTorch's DYNAMIC mode; shardproof exchanges it across the stages before
capture: frontends/torch_stage_shapes.py). The blocks change width (4 -> 6 -> 3 -> 5 -> 2),
so every stage boundary carries another shape than the batch's. Otherwise the step of
``pp_schedules.py`` (any of its schedules).

    shardproof verify src/shardproof/zoo/train/pp_inferred_shapes.py --world-size 2
"""
import torch
from torch import nn

from pp_schedules import ScheduledPipeline, case as schedules_case
from mini_pipeline import Stack

WORLD_SIZES = (2,)
WIDTHS = (4, 6, 3, 5, 2)


def blocks():
    return [nn.Sequential(nn.Linear(a, b), nn.Tanh()) for a, b in zip(WIDTHS, WIDTHS[1:])]


def batch():
    return {"x": torch.randn(8, 2, WIDTHS[0]), "target": torch.randn(8, 2, WIDTHS[-1])}


class InferredShapes(ScheduledPipeline):
    """Each stage given only its module: the schedule infers its shapes."""

    def stage_inputs(self, stage: int, example: torch.Tensor) -> dict:
        return {}

    def make_stage(self, stage: int, example: torch.Tensor):
        from torch.distributed.pipelining import PipelineStage
        submod = Stack([self.layers[i] for i in self.stage_layers(stage)])
        return PipelineStage(submod, stage, self.n_stages, torch.device("cpu"), **self.stage_inputs(stage, example))


class WrongInputShape(InferredShapes):
    """Stage 1 given an input example of the batch's width (4) while stage 0 sends 6 wide
    activations (and no output example, so the schedule still infers): PyTorch's inference
    raises at stage 1; so must the capture (an error naming stage 1, never a guess)."""

    def stage_inputs(self, stage, example):
        return {"input_args": (torch.empty_like(example).requires_grad_(),)} if stage == 1 else {}


def case(world_size: int = 2, schedule: str = "1f1b", model=InferredShapes, name=None):
    return schedules_case(world_size, schedule, blocks=blocks, batch=batch, model=model,
                          name=name or f"pp_inferred_shapes_{schedule}")
