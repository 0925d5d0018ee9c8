"""The Ulysses GQA training step of ``ulysses_gqa_train.py`` with fewer KV heads than cp ranks
(1 KV head at cp 2, 2 at cp 4): each KV head is repeated before the all_to_all (``mini_mesh.py``
``widen_kv``), so each rank holds one replica and the query heads of its group that it keeps.

Verified at cp 2 and 4 (tests/test_fourd.py, tests/test_cp_gqa_few_kv.py), and correct on a
real gloo group. Each rank's gradient of its KV replica is a partial sum over its own query
heads only (a piece of the group's sum); RoPE's backward multiplies that piece by the rank's
(replicated) tables, the all_to_all brings the replicas' pieces of one KV head to one rank, and
the repeat's backward adds them. ``algebra/sum_pieces.py`` proves it: a sum over the dim that
indexes the received pieces is the sum of those pieces, normalized as a collective's sum is
(the same linear map with the same other operands on every piece distributes; pieces of one
reduction over a partition complete), and whole sums move under concatenations, selections and
factors constant along the summed dim, so that summing before or after RoPE's backward meets
one term. The bug twins (``bugs/ulysses_gqa_train_kv_tiled.py``,
``bugs/ulysses_gqa_train_kv_wrong_rank.py``) are found in the forward.

    shardproof verify src/shardproof/zoo/train/ulysses_gqa_train_widened.py --world-size 4
"""
from ulysses_gqa_train import case as gqa_case

WORLD_SIZES = (2, 4)


def case(world_size: int = 4, **kw):
    kw.setdefault("name", "ulysses_gqa_train_widened")
    kw.setdefault("meta", {"source": "DeepSpeed-Ulysses training step, fewer KV heads than cp ranks"})
    kw.setdefault("kv_heads", max(1, world_size // 2))
    return gqa_case(world_size, **kw)
