"""Bug (DeepSpeed issue 6545: expert gradients ep_size times too large): in the expert-parallel
MoE step (src/shardproof/zoo/train/moe_ep_train.py) each expert has already summed, through
the dispatch all_to_all, the gradient contributions of the whole ep group's tokens; after
the all_reduce over the expert-data-parallel group the step divides the experts' gradients
by that group's size instead of the data-parallel world size (edp * ep), so they come out
ep times too large. Expected (dp2 x ep2): the first finding at that division, on every rank."""
from moe_ep_train import TrainExpertParallelMoE, case as moe_case

WORLD_SIZES = (4,)


class ExpertGradDividedByExpertDataParallelSize(TrainExpertParallelMoE):
    def grad_divisor(self, name):
        return self.mesh.dp if name in self.experts_params else self.mesh.world  # BUG: edp size, not the world


def case(world_size: int = 4):
    return moe_case(world_size, dp=2, model=ExpertGradDividedByExpertDataParallelSize,
                    name="moe_expert_grad_ep_times_too_large",
                    meta={"source": "DeepSpeed issue 6545",
                          "bug_op": "aten.div", "bug_ranks": "all", "bug": "scaling-mismatch",
                          "hint": r"scale factor", "bug_line": "self.grad_divisor(n)",
                          "bug_node": "div_6", "bug_source": "moe_ep_train.py"})
