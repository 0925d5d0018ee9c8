"""Bug (Entangle's catalogue: missing MoE router gradient all_reduce): in the expert-parallel
MoE step (src/shardproof/zoo/train/moe_ep_train.py) the router is replicated on every rank but
sees only the rank's tokens, so its gradient is a partial sum over all ranks; the step
all-reduces the experts' gradients and forgets the router's (it is only divided by the
world size). Expected (dp2 x ep2): the first finding where that partial gradient is used,
squared by the clipping norm on the ranks that count the replicated router (ep rank 0)."""
from mini_megatron import all_reduce
from moe_ep_train import TrainExpertParallelMoE, case as moe_case

WORLD_SIZES = (4,)


class RouterGradNotReduced(TrainExpertParallelMoE):
    def reduce_gradients(self, grads):
        return {n: (g if n in self.replicated else all_reduce(g, self.reduce_group(n))) / self.grad_divisor(n)
                for n, g in grads.items()}  # BUG: the router's gradient is never all-reduced


def case(world_size: int = 4):
    return moe_case(world_size, dp=2, model=RouterGradNotReduced, name="moe_router_grad_not_reduced",
                    meta={"source": "Entangle: missing MoE router gradient all_reduce",
                          "bug_op": "aten.mul", "bug_ranks": [0, 2], "bug": "missing-gradient-reduction",
                          "hint": r"all_reduce", "bug_line": "(g * g).sum()",
                          "bug_node": "mul_20", "bug_source": "mini_megatron.py"})
