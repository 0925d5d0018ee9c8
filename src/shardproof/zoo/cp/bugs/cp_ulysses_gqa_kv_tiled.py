"""Bug (Ulysses, grouped-query attention, fewer KV heads than ranks): the KV heads are repeated
before the split by tiling (``x.repeat(1, cp / h, 1, 1)``: heads k0 k1 k0 k1) instead of
interleaving (k0 k0 k1 k1), so at cp 4 rank 1 receives KV head 1 while its query heads (2, 3)
share KV head 0 (and rank 2 the reverse). Expected finding: the scores of ranks 1 and 2 (q k^T: the key operand is
another rank's piece while the query is the rank's own)."""
from cp_ulysses_gqa import UlyssesGQA, case as gqa_case

WORLD_SIZES = (4,)


class TiledKV(UlyssesGQA):
    def widen_kv(self, x):
        if x.shape[1] % self.world == 0:
            return x
        return x.repeat(1, self.world // x.shape[1], 1, 1)


def case(world_size: int = 4):
    return gqa_case(world_size, model=TiledKV, name="cp_ulysses_gqa_kv_tiled",
                    meta={"source": "KV heads tiled instead of repeated per group before the Ulysses split",
                          "bug": "wrong-shard-offset", "bug_node": "bmm", "bug_op": "aten.bmm", "bug_ranks": [1, 2],
                          "bug_code": "s = q @ k.transpose(-2, -1)"})
