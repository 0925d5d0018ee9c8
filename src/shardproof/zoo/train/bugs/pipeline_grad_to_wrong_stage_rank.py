"""Bug: an activation gradient sent to the wrong stage rank in a hand-written 1F1B loop
(pp2 x dp2, rank = stage * dp + dp_rank). The forward P2P peers are right; the backward ones
are computed with the data-parallel ranks crossed (on both ends, so nothing hangs): stage 1 of
replica d sends its input gradient to stage 0 of replica 1 - d, which backpropagates it through
its own microbatch's activations. The loss is right; stage 0's weight gradients pair each
replica's activations with the other replica's output gradients. Expected finding: stage 0's
first backward (the tanh's, whose output-gradient operand is the other replica's piece) on
ranks 0 and 1, microbatch 0. The correct twin: ``pipeline_mlp_1f1b_pp2_dp2.py``."""
from mini_pipeline import PipelineTraining
from pipeline_mlp_1f1b import case as pipeline_case

WORLD_SIZES = (4,)
SWEEP = True  # tests/test_training.py checks its meta in the sweep; tests/test_pp_wrong_stage_grad.py in make test


class GradToWrongStageRank(PipelineTraining):
    def crossed(self, stage: int) -> int:
        return stage * self.mesh.dp + (self.mesh.dp - 1 - self.mesh.dp_rank)

    def grad_prev_rank(self):
        return self.crossed(self.mesh.stage - 1)  # BUG: the previous stage of the other dp replica

    def grad_next_rank(self):
        return self.crossed(self.mesh.stage + 1)  # BUG: (its receiving end, so the exchange matches)


def case(world_size: int = 4):
    return pipeline_case(world_size, pp=2, model=GradToWrongStageRank, name="pipeline_grad_to_wrong_stage_rank",
                         meta={"source": "1F1B backward P2P peer wrong: the input gradient sent to another replica's "
                                         "previous stage",
                               "bug": "wrong-shard-offset", "bug_node": "tanh_backward", "bug_op": "aten.tanh_backward",
                               "bug_ranks": [0, 1], "bug_stage": 0, "bug_microbatch": 0,
                               "bug_source": "mini_pipeline.py:82", "bug_line": "self.layers[i](x)",
                               "hint": "same piece as on rank"})
