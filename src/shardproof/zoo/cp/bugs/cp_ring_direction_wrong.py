"""Bug (causal ring attention): the ring step direction is reversed -- every rank sends its K/V
block to the previous rank and receives from the next -- while the loop still takes the block at
step i to be rank (rank - i)'s, so the causal block masks (and the skipping of fully masked
blocks) use the wrong key positions. At cp 2 the next and previous rank coincide and the program
is correct (the case is cp 4 only); at cp 4 ranks 1 and 2 attend to the wrong keys."""
from cp_ring_attention import case as ring_case

WORLD_SIZES = (4,)


def case(world_size: int = 4):
    return ring_case(world_size, causal=True, bug="ring_direction", name="cp_ring_direction_wrong",
                     meta={"source": "ring step direction wrong (recv from the wrong neighbour)",
                           "bug": "mask-offset", "bug_node": "masked_fill_1", "bug_op": "aten.masked_fill",
                           "bug_ranks": [1, 2], "bug_code": "s.masked_fill("})
