"""Context parallelism: ring attention without a causal mask over the load-balanced layout. The
sequence is cut into 2 * cp chunks and rank r holds chunks r and 2*cp-1-r (the layout
torch's context_parallel and Megatron's CP use for causal attention, kept here for a
non-causal layer of the same model); every key block is merged, and the output is gathered
back into sequence order. The fourth corner of {causal, not} x {load-balanced, not}.

    shardproof verify src/shardproof/zoo/cp/cp_ring_attention_balanced_noncausal.py --world-size 2
"""
from cp_ring_attention import case as ring_case

WORLD_SIZES = (2, 4)


def case(world_size: int = 2):
    return ring_case(world_size, causal=False, balanced=True, name="cp_ring_attention_balanced_noncausal",
                     meta={"source": "load-balanced ring attention, no causal mask (torch context_parallel layout)"})
