"""Stages split by ``torch.distributed.pipelining.pipeline()`` (the tracer split: the whole
model exported with torch.export and cut at ``SplitPoint.BEGINNING`` of chosen layers) run by
PyTorch's schedules: each rank builds its stage with ``pipe.build_stage`` (a
``_PipelineStage``: the split graph module of its layers, shapes from the trace) and runs
``ScheduleGPipe`` / ``Schedule1F1B`` with the default loss (a mean per microbatch,
``scale_grads``). The split graph modules hold the model's own parameters (the same
tensors), so the gradients land in the whole model's ``.grad`` as in pp_schedules.py.
The split runs once, on the case's model, before any rank is built (the user's code before
the step; torch.export refuses to trace under the capture's patched collectives)."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # pp_schedules

from pp_schedules import SCHEDULES, ScheduledPipeline, case as schedule_case  # noqa: E402


class TracedPipeline(ScheduledPipeline):
    """One rank of a step whose stages ``pipeline()`` split from the whole model (`pipe`)."""

    def __init__(self, full, rank: int, world: int, schedule: str, pipe, **kw):
        super().__init__(full, rank, world, schedule, **kw)
        if pipe.num_stages != self.n_stages:
            raise ValueError(f"pipeline() split {pipe.num_stages} stages; {schedule} at pp{world} runs {self.n_stages}")
        self.__dict__["pipe"] = pipe  # not a submodule: its parameters are the model's own, named alike

    def make_stage(self, stage: int, example: torch.Tensor):
        return self.pipe.build_stage(stage, torch.device("cpu"))

    def run_schedule(self, inputs):
        """The split modules run with this module's parameters as they are now (a functional
        call of this module swaps its own attributes, not the split modules' references to
        the same tensors)."""
        from functools import reduce
        from torch.nn.utils.stateless import _reparametrize_module
        split_gm = self.pipe.split_gm
        mine = {n: reduce(getattr, n.split(".", 1)[1].split("."), self) for n, _ in split_gm.named_parameters()}
        with _reparametrize_module(split_gm, mine):
            return super().run_schedule(inputs)


def split(full, example: torch.Tensor, stages: int):
    """The whole model cut by ``pipeline()`` before the first layer of each stage but the
    first (equal layer counts), traced on one microbatch `example`."""
    from torch.distributed.pipelining import SplitPoint, pipeline
    per = len(full.layers) // stages
    return pipeline(full, mb_args=(example,), split_spec={f"layers.{s * per}": SplitPoint.BEGINNING
                                                          for s in range(1, stages)})


def case(world_size: int = 2, schedule: str = "1f1b", layers: int = 4, hidden: int = 4, model=TracedPipeline):
    """The split is the user's code before the step (torch.export, once for the whole model):
    done here, on the case's own model, not inside a rank's captured program."""
    from pp_schedules import MICROBATCHES, regression_batch
    example = torch.empty(8, 2, hidden).chunk(MICROBATCHES)[0].zero_()  # one microbatch's shape
    holder = {}

    def make(full, rank, world, sched):
        if "pipe" not in holder:
            holder["pipe"] = split(full, example, world * SCHEDULES[sched][1])
        return model(full, rank, world, sched, holder["pipe"])
    c = schedule_case(world_size, schedule, layers=layers, hidden=hidden,
                      batch=lambda: regression_batch(8, 2, hidden),  # drawn after the case seeds
                      model=make, name=f"pipelining_traced_mlp_{schedule}")
    holder["pipe"] = split(c.single, example, world_size * SCHEDULES[schedule][1])
    c.meta["source"] = f"torch.distributed.pipelining pipeline() split, {SCHEDULES[schedule][0]}"
    return c
