"""Context parallelism: causal ring attention. As cp_ring_attention, with each step's block mask
built from the rank's and the block owner's sequence offsets (``rank * chunk + arange(chunk)``),
and the K/V blocks of later ranks (every key after every query) skipped without attending.

    shardproof verify src/shardproof/zoo/cp/cp_ring_attention_causal.py --world-size 2
"""
from cp_ring_attention import case as ring_case

WORLD_SIZES = (2, 4)


def case(world_size: int = 2):
    return ring_case(world_size, causal=True, name="cp_ring_attention_causal",
                     meta={"source": "ring attention, causal (Liu et al. 2023); torch context_parallel"})
