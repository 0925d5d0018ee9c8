"""Bug (VERDICT repro 10, "single-rank mutant on the backward of a fan-out (multiref)"): the
residual stream after attention is read twice, by the residual add and by the MLP's norm; its
gradient is the sum of the two branches' gradients. On rank 2, the fan-out's backward adds
the residual branch's gradient twice (g1 + g1 instead of g1 + g2), as a custom autograd
function for the split can. Forward values are all correct. Expected: the first finding at
the add in that backward, on rank 2 only."""
import torch

from llama_block_train import TrainParallelLlamaBlock, case as llama_case

WORLD_SIZES = (4,)


class MultirefSameGradTwice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h):
        return h.view_as(h), h.view_as(h)

    @staticmethod
    def backward(ctx, grad_residual, grad_norm):
        return grad_residual + grad_residual  # BUG: should be grad_residual + grad_norm


class WrongFanOutBackward(TrainParallelLlamaBlock):
    def fan_out(self, h):
        return MultirefSameGradTwice.apply(h) if self.mesh.rank == 2 else super().fan_out(h)


def case(world_size: int = 4):
    return llama_case(world_size, dp=2, model=WrongFanOutBackward, name="verdict10_multiref_backward",
                      meta={"source": "VERDICT repro 10: fan-out (multiref) backward sums one gradient twice",
                            "bug_op": "aten.add", "bug_ranks": [2], "bug": "wrong-operand",
                            "hint": r"wrong tensor",
                            "bug_node": "add_8", "bug_source": "verdict10_multiref_backward.py"})
