"""Bug (Ulysses, grouped-query attention, 4 KV heads at cp 2): the KV heads are split over the wrong dim of their
unflattened head axis -- ``unflatten(1, (h / cp, cp)).unbind(2)`` sends rank j heads j, j + cp,
... (strided) while the query heads go in consecutive blocks -- so each rank's second pair of
query heads attends to the other rank's first KV head. (With one KV head per rank the two splits
coincide.) Expected finding: on every rank, the unflatten of the
key heads (its sizes make no view of the rank's piece a piece of the single device's)."""
import torch

from cp_ulysses_gqa import UlyssesGQA, case as gqa_case

WORLD_SIZES = (2,)


class StridedKV(UlyssesGQA):
    def head_chunks(self, x, kv: bool):
        if not kv:
            return super().head_chunks(x, kv)
        return list(x.unflatten(1, (x.shape[1] // self.world, self.world)).unbind(2))


def case(world_size: int = 2):
    return gqa_case(world_size, model=StridedKV, name="cp_ulysses_gqa_kv_split_strided", kv_heads=4,
                    meta={"source": "Ulysses all_to_all split over the wrong dim of the KV heads (GQA pairing)",
                          "bug": "wrong-view-size", "bug_node": "view_7", "bug_op": "aten.view", "bug_ranks": "all",
                          "bug_code": "unflatten(1, (x.shape[1] // self.world, self.world)).unbind(2)"})
