"""Context parallelism: causal ring attention merging (output, log-sum-exp) pairs, as torch's
context_parallel and flash-attention's ring kernels do: each step returns its block's normalized
output and row log-sum-exp; merging takes lse = logaddexp(lse, lse_j) and rescales both outputs
by exp(lse_old - lse) and exp(lse_j - lse).

    shardproof verify src/shardproof/zoo/cp/cp_ring_attention_lse.py --world-size 2
"""
from cp_ring_attention import case as ring_case

WORLD_SIZES = (2, 4)


def case(world_size: int = 2):
    return ring_case(world_size, causal=True, lse_merge=True, name="cp_ring_attention_lse",
                     meta={"source": "ring attention with the log-sum-exp merge (torch context_parallel)"})
