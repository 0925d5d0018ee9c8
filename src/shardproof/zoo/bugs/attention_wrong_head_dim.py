"""Bug (issue 17, "a wrong head_dim in a view"): the tensor-parallel attention splits its local
q/k/v projections into heads with the *global* head count, ``t.view(b, s, HEADS, -1)``, where
the rank holds only HEADS / world heads: each "head" gets head_dim / world features, so the
rank's heads are not the single-device heads (and the scores, softmax and everything after
are wrong). Expected finding: the view whose shape arguments differ from the single-device
view's, on every rank -- not the matmul that consumes it."""
import torch

from shardproof import Case
from tp_attention import BATCH, HEADS, HIDDEN, SEQ, Attention, ParallelAttention

WORLD_SIZES = (2,)  # at 4 the global-count view cannot even be formed


class GlobalHeadsView(ParallelAttention):
    def _split(self, t):
        b, s, _ = t.shape
        return t.view(b, s, HEADS, -1).transpose(1, 2)  # BUG: HEADS is the global count; the rank holds local_heads


def case(world_size: int = 2) -> Case:
    torch.manual_seed(0)
    full = Attention()
    return Case(single=full, distributed=lambda rank, world: GlobalHeadsView(full, rank, world),
                inputs={"x": torch.randn(BATCH, SEQ, HIDDEN)}, world_size=world_size,
                name="attention_wrong_head_dim",
                meta={"source": "issue 17: wrong head_dim in a hand-written TP attention",
                      "bug_op": "aten.view", "bug_node": "view_2", "bug_ranks": "all", "bug": "wrong-view-size",
                      "hint": r"view|shape|head"})
