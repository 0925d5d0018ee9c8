"""Bug (issue 14, class 3; this zoo's own moe_ep_train before the fix): the all_to_all's
receive buffer is ``torch.empty_like(x)``. In the backward the incoming gradient is not
contiguous, so neither is the buffer, and ``all_to_all_single`` writes it as if it were:
on a real gloo group the expert gradients differ from the single-device ones by ~5e-2
(NCCL refuses the buffer). Expected: a non-contiguous-buffer finding at that
all_to_all_single, on every rank."""
import torch

from moe_ep_train import TrainExpertParallelMoE, case as moe_case

WORLD_SIZES = (2,)


class EmptyLikeRecvBuffer(TrainExpertParallelMoE):
    recv_buffer = staticmethod(torch.empty_like)  # BUG: keeps a non-contiguous gradient's strides


def case(world_size: int = 2):
    return moe_case(world_size, dp=1, model=EmptyLikeRecvBuffer, name="moe_ep_noncontiguous_recv_buffer",
                    meta={"source": "issue 14: all_to_all_single into a non-contiguous buffer",
                          "bug_op": "_c10d_functional.all_to_all_single", "bug_ranks": "all",
                          "bug": "non-contiguous-buffer",
                          "hint": r"contiguous", "bug_line": "dist.all_to_all_single(out",
                          "bug_node": "all_to_all_single_2",
                          "bug_source": "moe_ep_train.py"})
