"""The tensor-parallel MLP's training step with DDP-style bucketed gradient reduction: the
gradients are grouped into buckets in reverse registration order (the order backward makes
them ready), each bucket is flattened into one buffer (``torch.cat`` of ``.reshape(-1)``),
all-reduced over dp with one collective, and unflattened back to the parameters' shapes at
the offsets the flattening used. 2 microbatches, global-norm clipping, AdamW; dp2 and
dp2 x tp2.

    shardproof verify src/shardproof/zoo/train/ddp_bucket_train.py --world-size 4
"""
import torch

from mini_megatron import all_reduce
from tp_mlp_train import TrainParallelMLP, case as mlp_case

MESHES = ((2, 1), (2, 2))  # (dp, tp)


class BucketedGradients(TrainParallelMLP):
    bucket_size = 2
    """Parameters per bucket (DDP caps buckets by bytes; here by count, two buckets)."""

    def buckets(self, names):
        ready = list(reversed(names))
        return [ready[i:i + self.bucket_size] for i in range(0, len(ready), self.bucket_size)]

    def flatten(self, grads, bucket):
        return torch.cat([grads[n].reshape(-1) for n in bucket])

    def offsets(self, grads, bucket):
        """Where each gradient of `bucket` lies in its flat buffer: (name, start, end)."""
        out, at = [], 0
        for n in bucket:
            out.append((n, at, at + grads[n].numel()))
            at += grads[n].numel()
        return out

    def reduce_gradients(self, grads):
        reduced = {}
        for bucket in self.buckets(list(grads)):
            flat = all_reduce(self.flatten(grads, bucket), self.mesh.dp_group)
            for n, start, end in self.offsets(grads, bucket):
                reduced[n] = flat[start:end].view_as(grads[n]).clone()  # copied out, as into param.grad
        return {n: reduced[n] for n in grads}


def case(world_size: int = 4, dp: int = 2, model=BucketedGradients, name="ddp_bucket_train", meta=None):
    return mlp_case(world_size, dp=dp, model=model, name=name, meta=meta or {"source": "DDP gradient buckets"})
