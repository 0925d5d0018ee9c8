"""Bug (VERDICT repro 5, "missing reduce in a backward fused operator"): the f operator in
front of the fused q/k/v projections (identity forward, all_reduce of the gradient in
backward) loses its backward all_reduce: the gradient reaching the attention RMSNorm is each
rank's partial sum over its own heads. Forward values are all correct. Expected: the first
finding in the attention norm's backward, on every rank, classed missing-gradient-reduction."""
import torch

from llama_block_train import TrainParallelLlamaBlock, case as llama_case

WORLD_SIZES = (4,)


class IdentityBothWays(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad, None  # BUG: all_reduce(grad, group) over tp is missing


class MissingBackwardReduce(TrainParallelLlamaBlock):
    def enter_attention(self, x):
        return IdentityBothWays.apply(x, self.mesh.tp_group)


def case(world_size: int = 4):
    return llama_case(world_size, dp=2, model=MissingBackwardReduce, name="verdict05_missing_backward_reduce_fused_qkv",
                      meta={"source": "VERDICT repro 5: missing backward reduce in a fused op",
                            "bug_op": "aten.mul", "bug_ranks": "all", "bug": "missing-gradient-reduction",
                            "hint": r"all_reduce.*backward", "bug_line": "+ eps) * weight",
                            "bug_node": "mul_29", "bug_source": "llama_block.py"})
