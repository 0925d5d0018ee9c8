"""Context parallelism, correct but odd: causal ring attention whose online softmax never
updates its shift -- every K/V block is exponentiated against the rank's own block's max
(exp(s - m_own)), the sums and accumulators are added without rescaling, and acc / l is taken
at the end. In exact arithmetic any finite per-row shift cancels in acc / l (here the own
block always holds the diagonal, so m_own is finite): the program equals softmax attention
(gloo agrees), though a larger later score could overflow in low precision.

    shardproof verify src/shardproof/zoo/cp/cp_ring_attention_fixed_shift.py --world-size 2
"""
from cp_ring_attention import case as ring_case

WORLD_SIZES = (2, 4)


def case(world_size: int = 2):
    return ring_case(world_size, causal=True, bug="fixed_shift", name="cp_ring_attention_fixed_shift",
                     meta={"source": "adversarial: one fixed shift for every block (max-shift invariance)"})
