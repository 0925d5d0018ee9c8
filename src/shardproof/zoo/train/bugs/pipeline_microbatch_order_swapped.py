"""Bug: microbatch order swapped in a 1F1B pipeline (pp2, 4 microbatches). The schedule saves
each forward's input and output and must run backward on the oldest (Megatron pops
``input_tensors.pop(0)``); this stage pops the newest, so in the steady state stage 0
backpropagates microbatch 0's output gradient through microbatch 1's activations."""
from mini_pipeline import PipelineTraining
from pipeline_mlp_1f1b import case as pipeline_case

WORLD_SIZES = (2,)


class NewestFirst(PipelineTraining):
    def pop_saved(self, saved):
        return saved.pop()  # BUG: LIFO; 1F1B's backward order is the forward order (pop(0))


def case(world_size: int = 2):
    return pipeline_case(world_size, model=NewestFirst, name="pipeline_microbatch_order_swapped",
                         meta={"source": "1F1B schedule: saved activations popped LIFO (Megatron pops FIFO)",
                               "bug": "rank-specific-mismatch", "bug_node": "tanh_backward", "bug_op": "aten.tanh_backward", "bug_ranks": [0],
                               "bug_source": "mini_pipeline.py:82", "bug_line": 'self.layers[i](x)', "bug_stage": 0, "bug_microbatch": 1,
                               "hint": 'differently'})
