"""The 1F1B MLP-stack step of ``pipeline_mlp_1f1b.py`` on a pp2 x dp2 mesh (rank = stage * dp +
dp_rank): each replica's stage 1 sends its input gradients to its own replica's stage 0. The
correct twin of ``bugs/pipeline_grad_to_wrong_stage_rank.py``.

    shardproof verify src/shardproof/zoo/train/pipeline_mlp_1f1b_pp2_dp2.py --world-size 4
"""
from pipeline_mlp_1f1b import case as pipeline_case

WORLD_SIZES = (4,)


def case(world_size: int = 4, **kw):
    return pipeline_case(world_size, pp=2, name="pipeline_mlp_1f1b_pp2_dp2",
                         meta={"source": "Megatron-style 1F1B pipeline (batch_isend_irecv), pp2 x dp2"}, **kw)
