"""Context parallelism: load-balanced causal ring attention. The sequence is cut into 2 * cp
chunks and rank r holds chunks r and 2*cp-1-r (so every rank does the same causal work, as
torch's context_parallel and Megatron's CP do); the block masks come from the positions of the
two chunks each rank holds; the output is gathered back into sequence order.

    shardproof verify src/shardproof/zoo/cp/cp_ring_attention_balanced.py --world-size 2
"""
from cp_ring_attention import case as ring_case

WORLD_SIZES = (2, 4)


def case(world_size: int = 2):
    return ring_case(world_size, causal=True, balanced=True, name="cp_ring_attention_balanced",
                     meta={"source": "load-balanced causal ring attention (torch context_parallel, Megatron CP)"})
