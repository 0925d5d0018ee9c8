"""Bug: a framework that averages gradients over dp (src/shardproof/zoo/train/tp_mlp_train_averaged.py)
divides the replicated parameters' gradients by the world size instead of the size of the
data-parallel group that holds their pieces (as expert-parallel code divides expert
gradients by the wrong group). Expected: the first finding at that division, on every rank."""
from tp_mlp_train_averaged import AveragedGradients, case as averaged_case

WORLD_SIZES = (4,)


class WrongGroupSize(AveragedGradients):
    def group_size(self, name):
        return self.mesh.world if name in self.replicated else self.mesh.dp  # BUG: world, not the dp group


def case(world_size: int = 4):
    return averaged_case(world_size, model=WrongGroupSize, name="replicated_grad_wrong_group",
                         meta={"source": "DeepSpeed 6545 class",
                               "bug_op": "aten.div", "bug_ranks": "all", "bug": "scaling-mismatch",
                               "hint": r"scale factor", "bug_line": "self.group_size(n)",
                               "bug_node": "div_9", "bug_source": "tp_mlp_train_averaged.py:22"})
