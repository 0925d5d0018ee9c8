"""A training step of an MLP under PyTorch FSDP2 (``torch.distributed.fsdp.fully_shard``),
data parallel over every rank, as torchtitan trains: each linear layer is its own FSDP
unit, every parameter is held as its dim-0 chunk (uneven sizes: FSDP pads the short
shards), all-gathered before use, and its gradient reduce-scattered in backward; 2
microbatches accumulate into ``.grad``; the loss is normalised by the global token count,
so FSDP must *sum* the gradients (``set_gradient_divide_factor(1.0)`` on every FSDP module)
rather than average them; then AdamW updates each rank's shard.

    shardproof verify src/shardproof/zoo/train/fsdp2_mlp_train.py --world-size 4
"""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard

from mini_megatron import all_reduce, masked_sq_error, regression_batch, token_mean_loss
from shardproof import AdamW, Case, Train
from shardproof.frontends.torch_train import optimizer_update, split_microbatches
from tp_mlp import MLP

HIDDEN, FFN, BATCH, SEQ = 10, 14, 8, 3  # dim 0 of 14 and 10 split unevenly over 4 ranks
MESHES = ((2, 1), (4, 1))  # (dp, tp): FSDP over every rank
TRAIN = Train(loss=token_mean_loss, optimizer=AdamW(lr=1e-2), microbatches=2)


class FSDPMLP(MLP):
    """The MLP with FSDP2 applied per layer and at the root, and its training step."""

    def __init__(self, full: MLP, world: int):
        super().__init__(full.fc1.in_features, full.fc1.out_features)
        self.load_state_dict(full.state_dict())
        mesh = init_device_mesh("cpu", (world,))
        for layer in (self.fc1, self.fc2):
            fully_shard(layer, mesh=mesh)
        fully_shard(self, mesh=mesh)
        self.sum_gradients()

    def sum_gradients(self):
        """The loss is already divided by the global token count: FSDP must not average too.
        The setting is per FSDP module (not recursive), so it goes on every one."""
        for module in self.modules():
            if isinstance(module, FSDPModule):
                module.set_gradient_divide_factor(1.0)

    def train_step(self, inputs, state, train):
        global_tokens = all_reduce(inputs["mask"].sum(), dist.group.WORLD)
        loss = 0
        for mb in split_microbatches(inputs, train.microbatches):
            mb_loss = masked_sq_error(self(mb["x"]), mb) / global_tokens
            mb_loss.backward()  # FSDP reduce-scatters the gradient, accumulating into .grad
            loss = loss + mb_loss.detach()
        params = {n: p.to_local() for n, p in self.named_parameters()}
        grads = {n: p.grad.to_local() for n, p in self.named_parameters()}
        updated = {n: optimizer_update(params[n], grads[n], state[n], train.optimizer) for n in params}
        return {"loss": all_reduce(loss, dist.group.WORLD), "grads": grads, "updated": updated}


def data_shard(rank, world, inputs):
    return {k: v.chunk(world, 0)[rank] for k, v in inputs.items()}


def case(world_size: int = 4, dp: int | None = None, model=FSDPMLP, train=TRAIN, name="fsdp2_mlp_train",
         meta=None) -> Case:
    torch.manual_seed(0)
    full = MLP(HIDDEN, FFN)
    return Case(single=full, distributed=lambda rank, world: model(full, world),
                inputs=regression_batch(BATCH, SEQ, HIDDEN), dist_inputs=data_shard, world_size=world_size,
                train=train, name=name, meta=meta or {"source": "PyTorch FSDP2 fully_shard (torchtitan-style step)"})
