"""Bug (minimal): a receive buffer reused while autograd still holds it for backward. Rank 1
receives microbatch 0 into ``buf``, computes ``buf @ w`` (autograd saves ``buf`` for w's
gradient), then receives microbatch 1 into the SAME buffer before the backward runs. A c10d
``recv`` does not bump the tensor's version, so autograd does not notice: w's gradient for
microbatch 0 is computed from microbatch 1's data (gloo: the gradients differ). The relational
proof sees values (a recv is a new value) and the temporal check sees the overwrite: a
``saved-buffer-overwritten`` finding on rank 1 at the second ``dist.recv``.
``case(world, fresh=True)`` is the correct twin (a fresh buffer per microbatch)."""
import torch
import torch.distributed as dist
from torch import nn

from pp_schedules import TRAIN, mse
from shardproof import Case, Train

WORLD_SIZES = (2,)
TWO = Train(loss=TRAIN.loss, microbatches=2)


class Single(nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = nn.Parameter(w.clone())

    def forward(self, x):
        return x @ self.w


class RecvIntoOneBuffer(Single):
    """Rank 0 sends the microbatches; rank 1 receives each, runs the model on it, then backward."""

    def __init__(self, w, rank, fresh):
        super().__init__(w)
        self.rank, self.fresh = rank, fresh

    def train_step(self, inputs, state, train):
        xs, targets = inputs["x"].chunk(2), inputs["target"].chunk(2)
        if self.rank == 0:
            for x in xs:
                dist.send(x.contiguous(), dst=1)
            loss, grad = torch.zeros(()), torch.zeros_like(self.w)
        else:
            buf, losses = torch.empty_like(xs[0]), []
            for target in targets:
                if self.fresh:
                    buf = torch.empty_like(xs[0])
                dist.recv(buf, src=0)  # BUG unless fresh: microbatch 0's saved input is overwritten
                losses.append(mse(buf @ self.w, target) / 2)
            loss = sum(losses)
            grad, = torch.autograd.grad(loss, [self.w])
            loss = loss.detach()
        dist.broadcast(grad, src=1)
        dist.broadcast(loss, src=1)
        return {"loss": loss, "grads": {"w": grad}}


def case(world_size: int = 2, fresh: bool = False) -> Case:
    torch.manual_seed(0)
    w = torch.randn(4, 3)
    name = "recv_buffer_fresh" if fresh else "recv_buffer_reused_while_saved"
    return Case(single=Single(w), distributed=lambda rank, world: RecvIntoOneBuffer(w, rank, fresh),
                inputs={"x": torch.randn(4, 4), "target": torch.randn(4, 3)}, world_size=world_size, train=TWO,
                name=name, meta={"source": "c10d recv into a buffer autograd saved (issue 18)",
                                 **({} if fresh else BUG)})


BUG = {"bug": "saved-buffer-overwritten", "bug_node": "recv_1", "bug_op": "c10d.recv", "bug_ranks": [1],
       "bug_source": "recv_buffer_reused_while_saved.py:47", "hint": "fresh buffer"}
