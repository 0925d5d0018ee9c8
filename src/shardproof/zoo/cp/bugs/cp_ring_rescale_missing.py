"""Bug (ring attention, online softmax): the running sum l and the accumulator acc are not
rescaled by exp(m_old - m_new) when a later K/V block raises the running max, so blocks merged
before the max rose keep their old scale (a flash-attention / ring-attention merge written
without the correction). Expected finding: the merge of the second block, on every rank."""
from cp_ring_attention import case as ring_case

WORLD_SIZES = (2, 4)


def case(world_size: int = 2):
    return ring_case(world_size, bug="no_rescale", name="cp_ring_rescale_missing",
                     meta={"source": "online-softmax rescale missing (ring/flash attention merge)",
                           "bug": "softmax-rescale-missing", "bug_node": "add_3", "bug_op": "aten.add", "bug_ranks": "all", "bug_code": "l = l * alpha + p.sum"})
