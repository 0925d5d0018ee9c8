"""Bug (torchtitan issue 596): clip_grad_norm computes the norm of the local shards only
(no all_reduce of the squared norms over tp), so each rank clips with a different, too
small norm. Expected: the first finding where the local squared norms of the sharded and the
replicated gradients are added (a partial sum used as if complete), on every rank."""
import torch

from tp_mlp_train import TrainParallelMLP, case as mlp_case

WORLD_SIZES = (2,)


class LocalNormClip(TrainParallelMLP):
    def grad_norm(self, grads):
        return torch.sqrt(sum((g * g).sum() for g in grads.values()))  # BUG: this rank's shards only


def case(world_size: int = 2):
    return mlp_case(world_size, dp=1, model=LocalNormClip, name="clip_local_norm",
                    meta={"source": "torchtitan issue 596",
                          "bug_op": "aten.add", "bug_ranks": "all", "bug": "missing-gradient-reduction",
                          "hint": r"all_reduce",
                          "bug_node": "add_11", "bug_source": "clip_local_norm.py:14"})
