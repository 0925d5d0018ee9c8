"""DTensor vocab-parallel cross entropy: the logits arrive sharded on the vocabulary (last)
dim, are wrapped as a ``Shard(1)`` DTensor, and ``F.cross_entropy`` runs inside
``torch.distributed.tensor.parallel.loss_parallel()``, which computes the loss without
gathering the logits (DTensor's vocab-parallel log_softmax and nll_loss handlers: all_reduce
MAX for the max, all_reduce SUM for the softmax denominator, MaskPartial for the target
logit). Single-device: ``CrossEntropy`` (F.cross_entropy) from vocab_parallel_cross_entropy.

    shardproof verify src/shardproof/zoo/dtensor_vocab_parallel_cross_entropy.py --world-size 4
"""
import torch
from torch import nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor.parallel import loss_parallel

from shardproof import Case
from vocab_parallel_cross_entropy import TOKENS, VOCAB, CrossEntropy, shard_logits

WORLD_SIZES = (2, 3, 4, 6, 8)



class LossParallelCrossEntropy(nn.Module):
    def __init__(self, world: int):
        super().__init__()
        self.mesh = init_device_mesh("cpu", (world,))

    def forward(self, logits, target):
        dlogits = DTensor.from_local(logits, self.mesh, [Shard(1)])
        with loss_parallel():
            loss = F.cross_entropy(dlogits, target)
        return loss.full_tensor()


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    logits = torch.randn(TOKENS, VOCAB)
    target = torch.randint(0, VOCAB, (TOKENS,))
    return Case(single=CrossEntropy(), distributed=lambda rank, world: LossParallelCrossEntropy(world),
                inputs={"logits": logits, "target": target}, dist_inputs=shard_logits,
                world_size=world_size, name="dtensor_vocab_parallel_cross_entropy",
                meta={"source": "DTensor loss_parallel"},
                description="cross entropy on Shard(1) DTensor logits under loss_parallel()",
                expect={"out": "Replicate()"})
