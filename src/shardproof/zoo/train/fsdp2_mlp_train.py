"""A training step of an MLP under PyTorch FSDP2 (``torch.distributed.fsdp.fully_shard``),
data parallel over every rank: each linear layer is its own FSDP unit, every parameter is
held as its dim-0 chunk (uneven sizes: FSDP pads the short shards), all-gathered before
use and its gradient reduce-scattered (averaged over the ranks) in backward; 2
microbatches accumulate into ``.grad``, then AdamW updates each rank's shard.

    shardproof verify src/shardproof/zoo/train/fsdp2_mlp_train.py --world-size 4
"""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from mini_megatron import all_reduce
from shardproof import AdamW, Case, Train
from shardproof.frontends.torch_train import optimizer_update, split_microbatches
from tp_mlp import MLP

HIDDEN, FFN, BATCH, SEQ = 10, 14, 8, 3  # dim 0 of 14 and 10 split unevenly over 4 ranks
WORLD_SIZES = (2, 4)


def mean_sq_error(out, batch):
    return 0.5 * ((out - batch["target"]) ** 2).mean()


TRAIN = Train(loss=mean_sq_error, optimizer=AdamW(lr=1e-2), microbatches=2)


class FSDPMLP(MLP):
    """The MLP with FSDP2 applied per layer and at the root; the step averages each rank's
    mean loss (equal local batches), as FSDP averages the gradients."""

    def __init__(self, full: MLP, world: int):
        super().__init__(full.fc1.in_features, full.fc1.out_features)
        self.load_state_dict(full.state_dict())
        mesh = init_device_mesh("cpu", (world,))
        for layer in (self.fc1, self.fc2):
            fully_shard(layer, mesh=mesh)
        fully_shard(self, mesh=mesh)

    def microbatch_loss(self, mb, train):
        return mean_sq_error(self(mb["x"]), mb) / train.microbatches

    def train_step(self, inputs, state, train):
        loss = 0
        for mb in split_microbatches(inputs, train.microbatches):
            mb_loss = self.microbatch_loss(mb, train)
            mb_loss.backward()  # FSDP reduce-scatters the gradient, accumulating into .grad
            loss = loss + mb_loss.detach()
        params = {n: p.to_local() for n, p in self.named_parameters()}
        grads = {n: p.grad.to_local() for n, p in self.named_parameters()}
        updated = {n: optimizer_update(params[n], grads[n], state[n], train.optimizer) for n in params}
        return {"loss": all_reduce(loss, dist.group.WORLD) / dist.get_world_size(), "grads": grads,
                "updated": updated}


def data_shard(rank, world, inputs):
    return {k: v.chunk(world, 0)[rank] for k, v in inputs.items()}


def case(world_size: int = 4, model=FSDPMLP, train=TRAIN, name="fsdp2_mlp_train", meta=None) -> Case:
    torch.manual_seed(0)
    full = MLP(HIDDEN, FFN)
    return Case(single=full, distributed=lambda rank, world: model(full, world),
                inputs={"x": torch.randn(BATCH, SEQ, HIDDEN), "target": torch.randn(BATCH, SEQ, HIDDEN)},
                dist_inputs=data_shard, world_size=world_size, train=train, name=name,
                meta=meta or {"source": "PyTorch FSDP2 fully_shard"})
