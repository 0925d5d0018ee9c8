"""Bug (PyTorch issue 160285: with EP=2 the expert gradients are exactly doubled): as in
torchtitan's dp2ep, the experts' gradients are averaged by their own data-parallel mesh
(FSDP's reduction with ReduceOp.AVG over the expert-data-parallel group) and not divided
further -- but with EP borrowed from the data-parallel ranks (ep = world, that mesh has one
rank) each expert has summed the gradients of all ranks' tokens through the all_to_all, so
they come out ep = 2 times too large. Fidelity: the mini framework averages the router over
all ranks as FSDP does and the experts over their mesh only; as in the issue's repro, the
gradients are compared without clipping (a clipped step rescales every gradient by the wrong
norm). Expected (ep2): the first finding at the experts' gradient reduction, on every rank."""
from dataclasses import replace

import torch.distributed as dist

from mini_megatron import all_reduce
from moe_ep_train import TRAIN, TrainExpertParallelMoE, case as moe_case

WORLD_SIZES = (2,)


class ExpertGradAveragedOverItsMesh(TrainExpertParallelMoE):
    def reduce_gradients(self, grads):
        return {n: all_reduce(g, self.mesh.dp_group, op=dist.ReduceOp.AVG) if n in self.experts_params  # BUG
                else all_reduce(g, self.reduce_group(n)) / self.grad_divisor(n) for n, g in grads.items()}


def case(world_size: int = 2):
    return moe_case(world_size, dp=1, model=ExpertGradAveragedOverItsMesh, train=replace(TRAIN, grad_clip=None),
                    name="moe_expert_grad_doubled_ep2",
                    meta={"source": "PyTorch issue 160285",
                          "bug_op": "aten.copy", "bug_ranks": "all", "bug": "scaling-mismatch",
                          "hint": r"scale factor", "bug_line": "dist.all_reduce(t, op=op",
                          "bug_node": "copy_7", "bug_source": "mini_megatron.py"})
