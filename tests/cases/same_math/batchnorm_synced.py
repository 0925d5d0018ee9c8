"""Same math (issue 15): synced BatchNorm in training mode on a batch-sharded activation (data
parallel), its statistics all-reduced by hand from each rank's sum and sum of squares
(``var = E[x^2] - E[x]^2``, the per-channel statistics viewed as ``[1, C, 1, 1]``), against
``F.batch_norm`` of the whole batch (``native_batch_norm``, training: batch statistics, the
biased variance) -- a polynomial identity over size-1 reshapes.

Buggy twins (``bug=True``), by ``wrong``: "local" normalizes by the rank's own statistics (no
all-reduce: plain BatchNorm under DDP); "unbiased" divides the variance by ``n - 1``, torch.var's
default, where batch norm normalizes by the biased variance."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from shardproof import Case

N, C, H, W, EPS = 8, 3, 2, 2, 1e-5


def single(x, weight, bias):
    return {"out": F.batch_norm(x, None, None, weight, bias, training=True, eps=EPS)}


def distributed(rank, world, bug=False, wrong="local"):
    def program(x, weight, bias):
        s1 = x.sum(dim=(0, 2, 3))
        s2 = (x * x).sum(dim=(0, 2, 3))
        n = N * H * W
        if not (bug and wrong == "local"):
            dist.all_reduce(s1)
            dist.all_reduce(s2)
        else:
            n = n // world  # BUG: the rank's own statistics
        mean = s1 / n
        var = (s2 - s1 * mean) / (n - 1) if bug and wrong == "unbiased" else s2 / n - mean * mean  # BUG: n - 1
        shape = (1, C, 1, 1)
        y = (x - mean.view(shape)) * torch.rsqrt(var.view(shape) + EPS)
        return {"out": y * weight.view(shape) + bias.view(shape)}
    return program


def shard(rank, world, inputs):
    return {"x": inputs["x"].chunk(world, 0)[rank], "weight": inputs["weight"], "bias": inputs["bias"]}


def case(world_size: int = 2, bug: bool = False, wrong: str = "local") -> Case:
    g = torch.Generator().manual_seed(0)
    inputs = {"x": torch.randn(N, C, H, W, generator=g), "weight": torch.randn(C, generator=g),
              "bias": torch.randn(C, generator=g)}
    return Case(single=single, distributed=lambda rank, world: distributed(rank, world, bug, wrong), inputs=inputs,
                dist_inputs=shard, world_size=world_size, name="same_math_batchnorm" + (f"_bug_{wrong}" if bug else ""),
                expect={"out": "Shard(0)"})


# ---------------------------------------------------------------- a training step (data parallel)

class BatchNorm(torch.nn.Module):
    """The single-device model: F.batch_norm over the whole batch; loss Σ out·t for a fixed t
    (Σ out² would not tell the statistics apart: a normalized output's second moment is fixed)."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.weight = torch.nn.Parameter(torch.randn(C, generator=g))
        self.bias = torch.nn.Parameter(torch.randn(C, generator=g))

    def forward(self, x):
        return single(x, self.weight, self.bias)["out"]


class SyncedBatchNorm(BatchNorm):
    """One rank's model: the synced batch norm by hand on its batch shard; its step all-reduces
    the loss and the parameters' gradients (data parallel)."""

    def __init__(self, rank, world, source: BatchNorm, bug=False, wrong="local"):
        super().__init__()
        self.load_state_dict(source.state_dict())
        self.program = distributed(rank, world, bug, wrong)

    def forward(self, x):
        return self.program(x, self.weight, self.bias)["out"]

    def train_step(self, inputs, state, train):
        params = dict(self.named_parameters())
        loss = train.loss(self(inputs["x"]), inputs)
        grads = torch.autograd.grad(loss, list(params.values()))
        for g in grads:
            dist.all_reduce(g)
        total = loss.detach().clone()
        dist.all_reduce(total)
        return {"loss": total, "grads": dict(zip(params, grads))}


def against_target(out, inputs):
    return (out * inputs["t"]).sum()


def train_case(world_size: int = 2, bug: bool = False, wrong: str = "local") -> Case:
    from shardproof import Train
    model = BatchNorm()
    g = torch.Generator().manual_seed(0)
    data = {"x": torch.randn(N, C, H, W, generator=g), "t": torch.randn(N, C, H, W, generator=g)}
    return Case(single=model, distributed=lambda rank, world: SyncedBatchNorm(rank, world, model, bug, wrong),
                inputs=data, dist_inputs=lambda rank, world, inputs: {k: v.chunk(world, 0)[rank] for k, v in inputs.items()},
                world_size=world_size, train=Train(loss=against_target),
                name="same_math_batchnorm_train" + (f"_bug_{wrong}" if bug else ""))
