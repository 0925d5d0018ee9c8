"""Bug (AReaL pull request 1273, "compensate pipeline schedule's /num_microbatches in grad",
https://github.com/areal-project/AReaL/pull/1273): Megatron Core's pipeline schedule divides
each microbatch's loss by ``num_microbatches`` (``_forward_step_helper``), while the caller had
already normalised the loss by the global token count: every gradient came out
``num_microbatches`` times too small. Here: a 1F1B pipeline (pp2, 4 microbatches) whose last
stage divides its token-normalised loss by the microbatch count again."""
from mini_pipeline import PipelineTraining
from pipeline_mlp_1f1b import case as pipeline_case

WORLD_SIZES = (2,)


class LossDividedTwice(PipelineTraining):
    def forward_step(self, i, x, total_tokens):
        out = super().forward_step(i, x, total_tokens)
        if self.last:  # BUG: already / global tokens; the schedule's / num_microbatches on top
            out = out / len(self.microbatches)
            self.saved[-1] = (i, self.saved[-1][1], out)
        return out


def case(world_size: int = 2):
    return pipeline_case(world_size, model=LossDividedTwice, name="areal_1273_loss_divided_by_microbatches",
                         meta={"source": "https://github.com/areal-project/AReaL/pull/1273",
                               "bug": "scaling-mismatch", "bug_node": "div_1", "bug_op": "aten.div", "bug_ranks": [1],
                               "bug_source": "areal_1273_loss_divided_by_microbatches.py:17",
                               "bug_line": "len(self.microbatches)", "hint": "rescaled", "bug_stage": 1, "bug_microbatch": 0})
