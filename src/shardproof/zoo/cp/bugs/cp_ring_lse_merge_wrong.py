"""Bug (ring attention, log-sum-exp merge): the running log-sum-exp is updated as lse + lse_j
(adding the logs, i.e. multiplying the sums) instead of logaddexp(lse, lse_j), so the merged
outputs are scaled wrongly. Expected finding: the first merge, on every rank that merges."""
from cp_ring_attention import case as ring_case

WORLD_SIZES = (2, 4)


def case(world_size: int = 2):
    return ring_case(world_size, bug="lse_add", lse_merge=True, name="cp_ring_lse_merge_wrong",
                     meta={"source": "LSE merge wrong: lse + lse_j for logaddexp (ring attention)",
                           "bug": "lse-merge-wrong", "bug_node": "add_3", "bug_op": "aten.add", "bug_ranks": "all", "bug_code": "new = lse + lse_j"})
