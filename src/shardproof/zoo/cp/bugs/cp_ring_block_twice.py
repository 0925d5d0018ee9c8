"""Bug (ring attention, online softmax): after the ring, the rank's own K/V block's share --
correctly rescaled to the final running max -- is added to l and acc once more (a merge loop
that visits the local block at step 0 and again at the end). Each term is consistent with the
running max, so the rescaling is right; only the key set is wrong (the own block counts
twice). Expected finding: the extra merge, on every rank."""
from cp_ring_attention import case as ring_case

WORLD_SIZES = (2, 4)


def case(world_size: int = 2):
    return ring_case(world_size, bug="block_twice", name="cp_ring_block_twice",
                     meta={"source": "adversarial: a key block merged twice (online softmax)",
                           "bug": "softmax-block-merged-twice", "bug_node": f"add_{3 * (world_size - 1) + 2}", "bug_op": "aten.add",
                           "bug_ranks": "all", "bug_code": "l, acc = l + own[0].sum"})
