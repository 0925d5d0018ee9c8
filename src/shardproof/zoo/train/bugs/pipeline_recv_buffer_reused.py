"""Bug (realistic): a pipeline stage that preallocates one receive buffer per direction and
reuses it for every microbatch (as Megatron's early ``p2p_communication`` did with
``tensor_recv_prev``). In 1F1B at pp3 (three blocks, one per stage), stage 1 receives
microbatch 0 in its warm-up and microbatch 1 before microbatch 0's backward: the second receive overwrites the activation autograd saved
for microbatch 0 (its Linear's input), without bumping its version, so microbatch 0's
gradients are computed from microbatch 1's activation (gloo: the gradients differ). The
temporal check reports ``saved-buffer-overwritten`` at the receive, with its rank.
``case(world, fresh=True)``: the correct twin (mini_pipeline's fresh buffer per receive)."""
import torch

from mini_pipeline import PipelineTraining, mlp_block
from pipeline_mlp_1f1b import HIDDEN, case as pipeline_case

WORLD_SIZES = (3,)


class ReusedRecvBuffer(PipelineTraining):
    def exchange(self, send_next=None, send_prev=None, recv_next=None, recv_prev=None):
        """mini_pipeline's exchange, receiving into one persistent buffer per direction."""
        cache = self.__dict__.setdefault("_recv_buffers", {})
        for key, shape in (("prev", recv_prev), ("next", recv_next)):
            if shape is not None and (key, tuple(shape)) not in cache:
                cache[(key, tuple(shape))] = torch.empty(shape)
        return super().exchange(send_next, send_prev, recv_next, recv_prev,
                                buffers={k: cache.get((k, tuple(s))) for k, s in (("prev", recv_prev),
                                                                                 ("next", recv_next))
                                         if s is not None})  # BUG: reused while autograd holds it

    def train_step(self, inputs, state, train):
        self.__dict__.pop("_recv_buffers", None)
        return super().train_step(inputs, state, train)


def case(world_size: int = 3, fresh: bool = False):
    name = "pipeline_recv_buffer_fresh" if fresh else "pipeline_recv_buffer_reused"
    return pipeline_case(world_size, model=PipelineTraining if fresh else ReusedRecvBuffer, name=name,
                         blocks=lambda: [mlp_block(HIDDEN) for _ in range(world_size)],
                         meta={"source": "1F1B stage reusing its receive buffer (Megatron's preallocated recv)",
                               **({} if fresh else BUG)})


BUG = {"bug": "saved-buffer-overwritten", "bug_node": "recv_1", "bug_op": "c10d.irecv", "bug_ranks": [1],
       "bug_source": "mini_pipeline.py:101", "bug_line": "dist.batch_isend_irecv(ops)", "bug_stage": 1,
       "bug_microbatch": 1, "hint": "fresh buffer"}
