"""A small CNN's training step under data parallelism (issue 15, core-ATen coverage): each rank
runs conv, relu, max pool, group norm, conv, adaptive average pool and a linear head on its
samples, takes gradients of its share of the loss (the whole batch's squared error over the
whole batch's size) and all-reduces every gradient. The backward runs convolution_backward,
max_pool2d_with_indices_backward, native_group_norm_backward and _adaptive_avg_pool2d_backward:
the weight and bias gradients are partial sums over the batch shard that the all_reduce completes.
Buggy twin: one gradient (``c1.weight``) left un-reduced. Labels: tests/test_vision_sharded.py,
on a real gloo group."""
import torch
import torch.distributed as dist
from torch import nn

from shardproof import Case, Train

BATCH, CLASSES = 4, 3


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 4, 3, padding=1)
        self.gn = nn.GroupNorm(2, 4)
        self.c2 = nn.Conv2d(4, 4, 3, padding=1)
        self.head = nn.Linear(16, CLASSES)

    def forward(self, x):
        h = nn.functional.max_pool2d(torch.relu(self.c1(x)), 2)
        h = nn.functional.adaptive_avg_pool2d(self.c2(self.gn(h)), 2)
        return self.head(h.flatten(1))


def loss(out, inputs):
    """Squared error summed over the samples, over the whole batch's size (a rank's share)."""
    return ((out - inputs["y"]) ** 2).sum() / (BATCH * CLASSES)


class DataParallelCNN(CNN):
    skip: frozenset = frozenset()  # gradients left un-reduced (the bug)

    def __init__(self, full: CNN):
        super().__init__()
        self.load_state_dict(full.state_dict())

    def train_step(self, inputs, state, train):
        params = dict(self.named_parameters())
        grads = dict(zip(params, torch.autograd.grad(loss(self(inputs["x"]), inputs), list(params.values()))))
        for n, g in grads.items():
            if n not in self.skip:
                dist.all_reduce(g)
        return {"loss": loss(self(inputs["x"]), inputs).detach(), "grads": grads}


class ForgetsOneGradient(DataParallelCNN):
    skip = frozenset({"c1.weight"})


def case(world_size: int = 2, buggy: bool = False) -> Case:
    torch.manual_seed(0)
    full = CNN()
    inputs = {"x": torch.randn(BATCH, 3, 8, 8), "y": torch.randn(BATCH, CLASSES)}
    model = ForgetsOneGradient if buggy else DataParallelCNN

    def shard(rank, world, data):
        return {k: v.chunk(world, 0)[rank] for k, v in data.items()}
    return Case(single=full, distributed=lambda rank, world: model(full), inputs=inputs, dist_inputs=shard,
                world_size=world_size, train=Train(loss=loss), name="cnn_dp_train" + ("_bug" if buggy else ""),
                meta={"buggy": buggy})
