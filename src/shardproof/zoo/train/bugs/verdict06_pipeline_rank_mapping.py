"""Bug (VERDICT repro 6, "wrong rank assignment of tensor movement between pipeline
stages"): on a pp2 x dp2 mesh (rank = stage * dp + dp_rank), the P2P peers of each stage are
computed with the data-parallel ranks crossed (replica 0's stage 0 sends to replica 1's
stage 1 and back), so each replica's activations arrive at the other replica's last stage
and are scored against the other replica's targets (VERDICT crosses tensor-parallel peers
the same way)."""
from mini_pipeline import PipelineTraining
from pipeline_mlp_1f1b import case as pipeline_case

WORLD_SIZES = (4,)


class CrossedPeers(PipelineTraining):
    def next_rank(self):
        return (self.mesh.stage + 1) * self.mesh.dp + (self.mesh.dp - 1 - self.mesh.dp_rank)  # BUG: dp ranks crossed

    def prev_rank(self):
        return (self.mesh.stage - 1) * self.mesh.dp + (self.mesh.dp - 1 - self.mesh.dp_rank)  # BUG: dp ranks crossed


def case(world_size: int = 4):
    return pipeline_case(world_size, pp=2, model=CrossedPeers, name="verdict06_pipeline_rank_mapping",
                         meta={"source": "VERDICT repro 6: wrong pipeline rank mapping",
                               "bug": "wrong-shard-offset", "bug_node": "sub", "bug_op": "aten.sub", "bug_ranks": [2, 3],
                               "bug_source": "mini_megatron.py:112", "bug_line": 'batch["target"]', "bug_stage": 1, "bug_microbatch": 0,
                               "hint": 'which shard'})
