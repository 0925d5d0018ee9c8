"""Pipeline-parallel training steps as PyTorch's own ``torch.distributed.pipelining`` runs
them: each rank builds its ``PipelineStage`` s (static shapes: ``input_args`` /
``output_args``, so no shape inference runs) over its blocks of the whole model and runs one
of PyTorch's schedules (``ScheduleGPipe``, ``Schedule1F1B``, ``ScheduleInterleaved1F1B``,
``ScheduleInterleavedZeroBubble``, ``ScheduleZBVZeroBubble``); the loss is the schedule's
per-microbatch ``loss_fn`` (a mean), the gradients accumulated over the microbatches and
scaled by 1/microbatches (the schedules' ``scale_grads``). The single-device reference is the
whole model's step on the whole batch (the mean loss).

Every rank holds the whole model's parameters (the graph inputs are the same names on every
rank) and runs only its stages' blocks; at the end each parameter's gradient is broadcast
from the rank that owns its stage, and the loss from the last stage's rank, so every rank
returns the whole step. World = pp (one rank per pipeline position).
"""
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # mini_pipeline

from mini_pipeline import Stack, mlp_block, regression_batch  # noqa: E402,F401
from shardproof import Case, Train  # noqa: E402

# schedule -> (class name in torch.distributed.pipelining.schedules, stages per rank, stage placement)
SCHEDULES = {"gpipe": ("ScheduleGPipe", 1, "loop"), "1f1b": ("Schedule1F1B", 1, "loop"),
             "interleaved_1f1b": ("ScheduleInterleaved1F1B", 2, "loop"),
             "interleaved_zb": ("ScheduleInterleavedZeroBubble", 2, "loop"),
             "zbv": ("ScheduleZBVZeroBubble", 2, "v")}
MICROBATCHES = 4


def mse(out, target):
    """The schedules' loss_fn: the mean squared error of a microbatch."""
    return ((out - target) ** 2).mean()


def batch_mse(outputs, batch):
    """The reference loss: the mean squared error over the whole batch (equal microbatches:
    the mean of the microbatches' means)."""
    return mse(outputs, batch["target"])


TRAIN = Train(loss=batch_mse, microbatches=MICROBATCHES)


def stages_of(rank: int, pp: int, schedule: str) -> list[int]:
    """The pipeline stages rank `rank` holds: one; or two, looped (rank, rank + pp) or in a V
    (rank, 2 pp - 1 - rank)."""
    _, per, placement = SCHEDULES[schedule]
    if per == 1:
        return [rank]
    return [rank, rank + pp] if placement == "loop" else [rank, 2 * pp - 1 - rank]


class ScheduledPipeline(nn.Module):
    """One rank of a ``torch.distributed.pipelining`` training step over `full` (a Stack)."""

    scale_grads = True  # the schedule divides the accumulated gradients by the microbatch count

    def __init__(self, full: Stack, rank: int, world: int, schedule: str, microbatches: int = MICROBATCHES):
        super().__init__()
        self.layers = full.layers
        self.rank, self.pp, self.schedule, self.microbatches = rank, world, schedule, microbatches
        self.n_stages = world * SCHEDULES[schedule][1]

    def stage_layers(self, stage: int) -> list[int]:
        per = len(self.layers) // self.n_stages
        return list(range(stage * per, (stage + 1) * per))

    def owner(self, stage: int) -> int:
        return next(r for r in range(self.pp) if stage in stages_of(r, self.pp, self.schedule))

    def make_stage(self, stage: int, example: torch.Tensor):
        from torch.distributed.pipelining import PipelineStage
        submod = Stack([self.layers[i] for i in self.stage_layers(stage)])
        # static shapes; what requires grad says which gradients travel back
        x, out = torch.empty_like(example).requires_grad_(stage > 0), torch.empty_like(example).requires_grad_()
        return PipelineStage(submod, stage, self.n_stages, torch.device("cpu"), input_args=(x,), output_args=(out,))

    def run_schedule(self, inputs):
        """The schedule's step on this rank: the stages' gradients (in ``.grad``) and the losses."""
        from torch.distributed.pipelining import schedules
        mine = stages_of(self.rank, self.pp, self.schedule)
        example = inputs["x"].chunk(self.microbatches)[0]
        stages = [self.make_stage(s, example) for s in mine]
        cls = getattr(schedules, SCHEDULES[self.schedule][0])
        sched = cls(stages if len(stages) > 1 else stages[0], n_microbatches=self.microbatches,
                    loss_fn=self.loss_fn(inputs), scale_grads=self.scale_grads)
        losses = []
        args = (inputs["x"],) if 0 in mine else ()
        target = inputs["target"] if self.n_stages - 1 in mine else None
        sched.step(*args, target=target, losses=losses)
        return losses

    def train_step(self, inputs, state, train):
        self.zero_grad(set_to_none=True)  # the schedule accumulates into .grad (optimizer.zero_grad())
        losses = self.run_schedule(inputs)
        last = self.owner(self.n_stages - 1)
        loss = self.total_loss(losses).detach() if self.rank == last else torch.zeros(())
        return {"loss": publish_loss(loss, last), "grads": publish_grads(self, self.owner_of_param)}

    def loss_fn(self, inputs):
        """The schedule's loss of one microbatch: its mean, the schedule scaling the gradients
        by 1/microbatches (``scale_grads``); or, not scaled, its sum over the whole batch's
        element count (the schedules' two documented forms)."""
        if self.scale_grads:
            return mse
        count = inputs["target"].numel()
        return lambda out, target: ((out - target) ** 2).sum() / count

    def total_loss(self, losses):
        return sum(losses) / len(losses) if self.scale_grads else sum(losses)

    def owner_of_param(self, name: str) -> int:
        layer = int(name.split(".")[1])
        return self.owner(next(s for s in range(self.n_stages) if layer in self.stage_layers(s)))


class SummedLoss(ScheduledPipeline):
    """The loss of each microbatch normalised by the whole batch, gradients not scaled."""
    scale_grads = False


def publish_grads(module: nn.Module, owner_of, group=None) -> dict:
    """Each parameter's gradient (``.grad``), broadcast from the rank `owner_of(name)`."""
    out = {}
    for n, p in module.named_parameters():
        g = p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
        dist.broadcast(g, src=owner_of(n), group=group)
        out[n] = g
    return out


def publish_loss(loss, src: int, group=None):
    dist.broadcast(loss, src=src, group=group)
    return loss


def case(world_size: int = 2, schedule: str = "1f1b", blocks=None, batch=None, name=None, layers: int = 4,
         hidden: int = 4, model=ScheduledPipeline) -> Case:
    """`blocks`, `batch`: factories of the blocks and the data (called after seeding)."""
    torch.manual_seed(0)
    full = Stack(blocks() if blocks else [mlp_block(hidden) for _ in range(layers)])
    return Case(single=full, distributed=lambda rank, world: model(full, rank, world, schedule),
                inputs=batch() if batch else regression_batch(8, 2, hidden), world_size=world_size, train=TRAIN,
                name=name or f"pipelining_mlp_{schedule}",
                meta={"source": f"torch.distributed.pipelining {SCHEDULES[schedule][0]} (PipelineStage)"})
