"""Bug (causal ring attention): rank 1 builds its query positions one too late
(``rank * chunk + arange(chunk) + 1``), so its block masks let each query see the next key.
Expected finding: the masked scores of rank 1."""
from cp_ring_attention import case as ring_case

WORLD_SIZES = (2, 4)


def case(world_size: int = 2):
    return ring_case(world_size, causal=True, bug="mask_offset", name="cp_ring_mask_offset",
                     meta={"source": "causal mask offset wrong on one rank (context parallelism)",
                           "bug": "mask-offset", "bug_node": "masked_fill", "bug_op": "aten.masked_fill",
                           "bug_ranks": [1], "bug_code": "s.masked_fill("})
