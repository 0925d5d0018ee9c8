"""Context parallelism: ring attention (not causal). Q, K and V are sharded by sequence; each
rank keeps its Q block and passes its K/V block to the next rank cp - 1 times
(batch_isend_irecv), attending to each block in turn and merging the partial results with the
online softmax (running max, running sum rescaled by exp(m_old - m_new), acc / l at the end),
as ring attention (Liu et al. 2023) and torch's context_parallel do. The single-device program is
plain softmax attention.

    shardproof verify src/shardproof/zoo/cp/cp_ring_attention.py --world-size 2
"""
from shardproof import Case
from _cp_ring import Attention, RingAttention, qkv_inputs

WORLD_SIZES = (2, 4)


def case(world_size: int = 2, causal: bool = False, balanced: bool = False, bug: str = "", name: str = "",
         meta: dict | None = None, lse_merge: bool = False) -> Case:
    return Case(single=Attention(causal),
                distributed=lambda rank, world: RingAttention(rank, world, causal, balanced, bug, lse_merge),
                inputs=qkv_inputs(), world_size=world_size, name=name or "cp_ring_attention",
                meta=meta or {"source": "ring attention (Liu et al. 2023); torch context_parallel"})
