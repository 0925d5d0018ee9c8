"""Context parallelism: DeepSpeed-Ulysses written with all_to_all_single over one heads-first
buffer (as DeepSpeed's _SeqAllToAll does): the sequence chunk is split from the head-shard output
with a 5-d view before the all_to_all back. Same program as cp_ulysses otherwise.

    shardproof verify src/shardproof/zoo/cp/cp_ulysses_one_buffer.py --world-size 2
"""
from cp_ulysses import case as ulysses_case

WORLD_SIZES = (2, 4)


def case(world_size: int = 2):
    return ulysses_case(world_size, one_buffer=True, name="cp_ulysses_one_buffer",
                        meta={"source": "DeepSpeed-Ulysses _SeqAllToAll (all_to_all_single)",
                              "known_gap": "the all_to_all_single back to sequence shards: the receive buffer of a "
                                           "5-d view of the head-shard output relates to no single-device tensor "
                                           "(relations stop at that aten.view)"})
