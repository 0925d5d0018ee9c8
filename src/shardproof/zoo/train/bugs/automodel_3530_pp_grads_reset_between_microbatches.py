"""Bug (NVIDIA-NeMo Automodel pull request 3530, "keep accumulated grads across stage
re-initialization", https://github.com/NVIDIA-NeMo/Automodel/pull/3530): the pipeline stages
were re-initialised between microbatches (``param.grad = None`` in PyTorch's
``_post_metadata_inference_cleanup``), so the gradients accumulated so far were dropped and only
the last microbatch trained the model; the loss, summed separately, looked right. Here: a 1F1B
pipeline (pp2, 4 microbatches) whose gradient accumulation keeps only the newest microbatch's."""
from mini_pipeline import PipelineTraining
from pipeline_mlp_1f1b import case as pipeline_case

WORLD_SIZES = (2,)


class GradsReset(PipelineTraining):
    def accumulate(self, grads, new):
        return dict(new)  # BUG: the accumulated gradients are wiped (param.grad = None) before each microbatch


def case(world_size: int = 2):
    return pipeline_case(world_size, model=GradsReset, name="automodel_3530_pp_grads_reset_between_microbatches",
                         meta={"source": "https://github.com/NVIDIA-NeMo/Automodel/pull/3530",
                               "bug": "wrong-group", "bug_node": "all_reduce_1", "bug_op": "_c10d_functional.all_reduce",
                               "bug_ranks": [0, 1], "bug_source": "mini_megatron.py:34", "bug_line": "dist.all_reduce",
                               "hint": "share of the reduction",
                               # the reduce runs after the schedule's step, outside any microbatch's work
                               "bug_stage": 0, "bug_microbatch": None, "bug_point": "after the last microbatch"})
