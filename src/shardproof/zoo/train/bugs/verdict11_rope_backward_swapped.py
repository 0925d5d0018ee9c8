"""Bug (VERDICT repro 11, "single-rank mutant on the backward of apply_rotary_emb, outputs
reversed"): on rank 1, RoPE is a custom autograd function whose backward returns its two
outputs in the wrong order. RoPE rotates each pair (x1, x2) of the head dim's two halves, so
its backward computes the gradients of x1 and of x2 -- and returns them swapped. (VERDICT's
function returned (grad_k, grad_q); with grouped-query attention q and k differ in shape, so
the two outputs swapped here are the halves' gradients.) Forward values are all correct.
Expected: the first finding at the concatenation of the swapped halves, on rank 1 only,
classed wrong-operand."""
import torch

from llama_block import apply_rope
from llama_block_train import TrainParallelLlamaBlock, case as llama_case

WORLD_SIZES = (4,)


class RotaryEmbSwappedGrads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin):
        ctx.save_for_backward(cos, sin)
        return apply_rope(x, cos, sin)

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        with torch.enable_grad():  # RoPE's own gradient, by autograd
            x = torch.zeros_like(grad, requires_grad=True)
            (grad_x,) = torch.autograd.grad(apply_rope(x, cos, sin), x, grad)
        half = grad.shape[-1] // 2
        grad_x1, grad_x2 = grad_x[..., :half], grad_x[..., half:]
        return torch.cat((grad_x2, grad_x1), dim=-1), None, None  # BUG: should be (grad_x1, grad_x2)


class SwappedRopeBackward(TrainParallelLlamaBlock):
    def rope(self, x):
        if self.mesh.rank != 1:
            return super().rope(x)
        s = x.shape[-2]
        return RotaryEmbSwappedGrads.apply(x, self.rope_cos[:s], self.rope_sin[:s])


def case(world_size: int = 4):
    return llama_case(world_size, dp=2, model=SwappedRopeBackward, name="verdict11_rope_backward_swapped",
                      meta={"source": "VERDICT repro 11: RoPE backward outputs swapped",
                            "bug_op": "aten.cat", "bug_ranks": [1], "bug": "wrong-operand",
                            "hint": r"wrong order",
                            "bug_node": "cat_3", "bug_source": "verdict11_rope_backward_swapped.py"})
