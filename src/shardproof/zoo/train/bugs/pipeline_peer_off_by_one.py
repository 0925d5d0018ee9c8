"""Bug: send/recv peer off by one in a 1F1B pipeline (pp4): the backward exchange of stage 2
sends its input gradient to stage 0 (``stage - 2``) instead of stage 1. Stage 1 waits for a
gradient that never comes and stage 0 is sent one it never receives: on a gloo group the
step hangs."""
from mini_pipeline import PipelineTraining
from pipeline_mlp_1f1b import case as pipeline_case

WORLD_SIZES = (4,)


class PeerOffByOne(PipelineTraining):
    def prev_rank(self):
        if self.mesh.stage == 2:
            return self.mesh.rank_of(self.mesh.stage - 2)  # BUG: off by one (the previous stage is stage - 1)
        return super().prev_rank()


def case(world_size: int = 4):
    return pipeline_case(world_size, model=PeerOffByOne, name="pipeline_peer_off_by_one",
                         meta={"source": "P2P peer computed off by one between pipeline stages",
                               "bug": "p2p-mismatch", "bug_node": "recv", "bug_op": "shardproof_p2p.recv", "bug_ranks": [0, 1, 2, 3],
                               "bug_source": "mini_pipeline.py:101", "bug_line": 'batch_isend_irecv', "bug_stage": 0, "bug_microbatch": 3,
                               "hint": 'peer ranks'})
