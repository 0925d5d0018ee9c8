"""The Ulysses GQA training step of ``ulysses_gqa_train.py`` with fewer KV heads than cp ranks
(2 KV heads at cp 4): each KV head is repeated before the all_to_all (``mini_mesh.py``
``widen_kv``), so each rank holds one replica and half of the query heads that share it.

Correct on a real gloo group (tests/test_fourd.py) and its forward is proved
(``zoo/cp/cp_ulysses_gqa.py`` at cp 4), but the step is **not proved yet** (unknown, a known
gap): each rank's gradient of its KV replica is a partial sum over its own query heads only
(a piece of the group's sum); RoPE's backward multiplies that piece, the all_to_all brings the
two replicas' pieces back to one rank, and the repeat's backward adds them -- completing the
sum, which needs "a sum of complementary partial sums, each through the same linear map, is
the map of the whole sum" as a local rewrite (today partial sums complete only through a
collective). On V's path (no RoPE) the same shows as nested sums: the copies summed in pairs on
each rank, then the pairs summed, where the single device sums each group of 4 copies at once
(``sum(reshape(sum(reshape(x))))`` is not yet normalized to the one sum).

Measured (issue 18, stop 24): with RoPE applied before the split (on the sequence shard, its
rows of the tables) the stop moves to the backward all_to_all's view of the same partial piece
(``aten.view``); gathering K/V over cp instead of the all_to_all stops at the rank's rows of the
RoPE tables (``aten.slice``). Both need the rule above (a linear map, slices and an all_to_all
of complementary pieces, then their sum: the map of the whole); the bug twins
(``bugs/ulysses_gqa_train_kv_tiled.py``, ``bugs/ulysses_gqa_train_kv_wrong_rank.py``) are
found in the forward already.

    shardproof verify src/shardproof/zoo/train/ulysses_gqa_train_widened.py --world-size 4
"""
from ulysses_gqa_train import case as gqa_case

WORLD_SIZES = (4,)
KNOWN_GAP = ("aten.mul: RoPE's backward of a KV replica's gradient that is a partial sum over part of its query "
             "heads (completed only later, by the repeat's backward on another rank's data)")


def case(world_size: int = 4, **kw):
    kw.setdefault("name", "ulysses_gqa_train_widened")
    kw.setdefault("meta", {"source": "DeepSpeed-Ulysses training step, fewer KV heads than cp ranks",
                           "known_gap": KNOWN_GAP})
    return gqa_case(world_size, kv_heads=2, **kw)
