"""Bug (torchtitan issue 2972, "PP and non-PP produce differently scaled gradients",
https://github.com/pytorch/torchtitan/issues/2972): under pipeline parallelism the last stage
backpropagates the raw summed loss of each microbatch; the division by the global token count
happens after the schedule, for the logged loss only, so every gradient is ``global_tokens``
times the single-device one. Here: a 1F1B pipeline (pp2, 4 microbatches) whose last stage
returns the unnormalised masked squared error from its forward step."""
from mini_pipeline import PipelineTraining, masked_sq_error
from pipeline_mlp_1f1b import case as pipeline_case

WORLD_SIZES = (2,)


class LossNotNormalized(PipelineTraining):
    def forward_step(self, i, x, total_tokens):
        x = self.microbatches[i]["x"] if self.first else x.requires_grad_(True)
        out = self.stage_forward(x)
        if self.last:
            out = masked_sq_error(out, self.targets(i))  # BUG: the schedule backpropagates the sum, not / total_tokens
        self.saved.append((i, x, out))
        return out


def case(world_size: int = 2):
    return pipeline_case(world_size, model=LossNotNormalized, name="torchtitan_2972_pp_loss_not_normalized",
                         meta={"source": "https://github.com/pytorch/torchtitan/issues/2972",
                               "bug": "rank-specific-mismatch", "bug_node": "mul_3", "bug_op": "aten.mul", "bug_ranks": [1],
                               "bug_source": "mini_megatron.py:112", "bug_line": 'batch["mask"]', "hint": "differently",
                               "bug_stage": 1, "bug_microbatch": 0})
