"""Bug (ring attention, online softmax): the final normalization divides the accumulator by
the running sum of the step before the last merge (``acc / prev_l``) -- a variable updated one
line too late. acc and l are each a correct online-softmax state; they are just of different
key sets and shifts. Expected finding: the division, on every rank."""
from cp_ring_attention import case as ring_case

WORLD_SIZES = (2, 4)


def case(world_size: int = 2):
    return ring_case(world_size, bug="stale_sum", name="cp_ring_stale_sum",
                     meta={"source": "adversarial: acc / l with the previous step's l (online softmax)",
                           "bug": "softmax-merge-wrong", "bug_node": "div", "bug_op": "aten.div",
                           "bug_ranks": "all", "bug_code": "acc / prev_l"})
