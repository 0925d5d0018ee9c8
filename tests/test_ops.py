"""Op rules on small programs: each must prove a correct rewrite and must not prove a wrong one."""
import pytest

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")
from torch import nn  # noqa: E402

from shardproof import Case, verify  # noqa: E402


class Program(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def _first_finding(report):
    """(node, op, ranks, bug class) of a violation's first finding."""
    assert report.status == "violation", report.status
    f = report.findings[0]
    return f.node, f.op, f.rank, f.kind


def _check(single, distributed, x=None):
    x = torch.randn(8, 3) if x is None else x
    return verify(Case(single=Program(single), distributed=lambda r, w: Program(distributed), inputs={"x": x},
                       expect={"out": "Replicate()"}))


def _fill_by_slices(x, split):
    buf = torch.empty(8, 3)
    buf = torch.slice_scatter(buf, x[:split], 0, 0, split)
    return torch.slice_scatter(buf, x[split:], 0, split, 8)


def test_slice_scatter_pieces_rebuild_the_tensor():
    assert _check(lambda x: x * 2, lambda x: _fill_by_slices(x * 2, 4)).status == "verified"


def test_slice_scatter_wrong_split_is_a_violation():
    wrong = lambda x: torch.slice_scatter(_fill_by_slices(x * 2, 4), x[:2] * 2, 0, 2, 4)  # noqa: E731
    # the last slice_scatter writes rows 0:2 where rows 2:4 belong
    assert _first_finding(_check(lambda x: x * 2, wrong)) == (
        "slice_scatter_2", "aten.slice_scatter", [0, 1], "wrong-shard-offset")


def test_rsub_is_linear():
    assert _check(lambda x: 1.0 - 3 * x, lambda x: torch.rsub(x * 3, 1.0)).status == "verified"
    assert _first_finding(_check(lambda x: 1.0 - 3 * x, lambda x: torch.rsub(x * 3, 2.0))) == (
        "rsub", "aten.rsub", [0, 1], "value-mismatch")


def test_log_softmax_equals_shifted_logsumexp_form():
    def manual(x):
        m = x.amax(-1, keepdim=True)
        return x - m - torch.log(torch.exp(x - m).sum(-1, keepdim=True))
    assert _check(lambda x: torch.log_softmax(x, -1), manual).status == "verified"


def test_triu_mask_on_constants():
    def masked(x):
        mask = torch.triu(torch.ones(8, 8, dtype=torch.bool), 1)
        return (x @ x.T).masked_fill(mask, 0.0)
    assert _check(masked, masked).status == "verified"


def test_triu_is_not_moved_past_a_reshape():
    def reshaped(x):
        return torch.triu(x.reshape(4, 6), 1).reshape(8, 3)
    assert _check(lambda x: torch.triu(x.reshape(4, 6), 1).reshape(8, 3), reshaped).status == "verified"
    wrong = lambda x: torch.triu(x, 1)  # noqa: E731  (triu before the reshape: a different tensor)
    assert _first_finding(_check(lambda x: torch.triu(x.reshape(4, 6), 1).reshape(8, 3), wrong)) == (
        "triu", "aten.triu", [0, 1], "value-mismatch")


class WhereMaskedEmbedding(nn.Module):
    """Vocab-parallel lookup written with torch.where instead of index assignment."""

    def __init__(self, table, rank, world):
        super().__init__()
        rows = table.shape[0] // world
        self.lo, self.hi = rank * rows, (rank + 1) * rows
        self.weight = nn.Parameter(table[self.lo:self.hi].clone())

    def forward(self, ids):
        mask = (ids < self.lo) | (ids >= self.hi)
        local = torch.where(mask, 0, ids - self.lo)
        out = torch.where(mask.unsqueeze(-1), 0.0, torch.nn.functional.embedding(local, self.weight))
        torch.distributed.all_reduce(out)
        return out


class Lookup(nn.Module):
    def __init__(self, table):
        super().__init__()
        self.weight = nn.Parameter(table.clone())

    def forward(self, ids):
        return torch.nn.functional.embedding(ids, self.weight)


@pytest.mark.parametrize("world", [2, 3])
def test_where_masked_vocab_parallel_embedding(world):
    table = torch.randn(24, 4)
    case = Case(single=Lookup(table), distributed=lambda r, w: WhereMaskedEmbedding(table, r, w),
                inputs={"ids": torch.randint(0, 24, (3, 5))}, world_size=world, expect={"out": "Replicate()"})
    assert verify(case).status == "verified"


class VllmMaskedEmbedding(nn.Module):
    """vLLM's ``VocabParallelEmbedding``: ids masked by multiplying with the in-range mask,
    an (empty) added-vocabulary range, and the out-of-range rows zeroed with masked_fill."""

    def __init__(self, table, rank, world, shift=0):
        super().__init__()
        rows = table.shape[0] // world
        self.vocab = table.shape[0]
        self.lo, self.hi = rank * rows + shift, (rank + 1) * rows + shift
        self.weight = nn.Parameter(table[rank * rows:(rank + 1) * rows].clone())

    def forward(self, ids):
        org = (ids >= self.lo) & (ids < self.hi)
        added = (ids >= self.vocab) & (ids < self.vocab)
        offset = self.lo * org + (self.vocab - (self.hi - self.lo)) * added
        mask = org | added
        local = mask * (ids - offset)
        out = torch.nn.functional.embedding(local, self.weight).masked_fill(~mask.unsqueeze(-1), 0)
        torch.distributed.all_reduce(out)
        return out


@pytest.mark.parametrize("world", [2, 3])
def test_vllm_masked_vocab_parallel_embedding(world):
    table = torch.randn(24, 4)
    case = Case(single=Lookup(table), distributed=lambda r, w: VllmMaskedEmbedding(table, r, w),
                inputs={"ids": torch.randint(0, 24, (3, 5))}, world_size=world, expect={"out": "Replicate()"})
    assert verify(case).status == "verified"


def _shifted_vocab_ranges():
    """Rank 1's vocabulary range starts one id late (rank 0's is right)."""
    table = torch.randn(24, 4)
    return Case(single=Lookup(table), distributed=lambda r, w: VllmMaskedEmbedding(table, r, w, shift=r),
                inputs={"ids": torch.arange(24).reshape(4, 6)}, world_size=2, expect={"out": "Replicate()"})


def test_vllm_masked_vocab_parallel_embedding_with_shifted_ranges_is_a_violation():
    assert verify(_shifted_vocab_ranges()).status == "violation"


def test_vllm_masked_vocab_parallel_embedding_with_shifted_ranges_is_blamed_on_the_shifted_rank():
    # the masks are rank-local values; rank 1's lookup is where its range and its rows disagree
    assert _first_finding(verify(_shifted_vocab_ranges())) == ("embedding", "aten.embedding", [1],
                                                               "rank-specific-mismatch")


class FusedGateUp(nn.Module):
    """A SwiGLU MLP whose gate and up projections are one weight [gate | up], split by chunk;
    the parallel version holds [gate_r | up_r] (an interleaved layout) and a row block of down."""

    def __init__(self, gate_up, down, rank=0, world=1, interleaved=True):
        super().__init__()
        ffn = gate_up.shape[0] // 2
        gate, up = gate_up[:ffn].chunk(world, 0)[rank], gate_up[ffn:].chunk(world, 0)[rank]
        self.gate_up = nn.Parameter(torch.cat([gate, up]) if interleaved else gate_up.chunk(world, 0)[rank].clone())
        self.down = nn.Parameter(down.chunk(world, 1)[rank].clone())
        self.world = world

    def forward(self, x):
        gate, up = (x @ self.gate_up.T).chunk(2, -1)
        y = (torch.nn.functional.silu(gate) * up) @ self.down.T
        if self.world > 1:
            torch.distributed.all_reduce(y)
        return y


@pytest.mark.parametrize("world", [2, 4])
def test_fused_gate_up_halves_pair_by_offset(world):
    gate_up, down = torch.randn(16, 6), torch.randn(6, 8)
    case = Case(single=FusedGateUp(gate_up, down), distributed=lambda r, w: FusedGateUp(gate_up, down, r, w),
                inputs={"x": torch.randn(3, 6)}, world_size=world, expect={"out": "Replicate()"})
    assert verify(case).status == "verified"


def test_fused_gate_up_sharded_plainly_is_a_violation():
    gate_up, down = torch.randn(16, 6), torch.randn(6, 8)
    case = Case(single=FusedGateUp(gate_up, down),
                distributed=lambda r, w: FusedGateUp(gate_up, down, r, w, interleaved=False),
                inputs={"x": torch.randn(3, 6)}, world_size=2, expect={"out": "Replicate()"})
    # rank 1's plain chunk of [gate | up] is all up: its "gate" half is a section of up
    assert _first_finding(verify(case)) == ("silu", "aten.silu", [1], "wrong-shard-offset")


def test_elementwise_of_windows_at_different_offsets_is_exact():
    # neighbouring columns multiplied: windows of one tensor at offsets 1 and 0, or the same
    # columns cut from a concatenation
    single = lambda x: x[:, 1:] * x[:, :-1]  # noqa: E731
    assert _check(single, lambda x: torch.cat([x, x], 1)[:, 4:6] * x[:, :2]).status == "verified"
    assert _first_finding(_check(single, lambda x: x[:, 1:] * x[:, 1:])) == (
        "slice_2", "aten.slice", [0, 1], "wrong-shard-offset")


def test_mask_normal_forms():
    from fractions import Fraction
    from shardproof.algebra import masks  # noqa: F401  (registers the rewrites)
    from shardproof.algebra.terms import TermStore
    from shardproof.ops.registry import lookup
    lookup("aten.add")  # loads every rule
    ts = TermStore()
    x = ts.make("input", ("x", "i64"), (), (4,))
    ge = ts.make("ge", ("$", 5, ()), (x,), (4,))
    lt = ts.make("lt", ("$", 5, ()), (x,), (4,))
    empty = ts.make("and", ("$", "$", ()), (ge, lt), (4,))
    assert masks.fill_of(ts, empty) is False
    inside = ts.make("and", ("$", "$", ()), (ge, ts.make("lt", ("$", 9, ()), (x,), (4,))), (4,))
    assert masks.fill_of(ts, inside) is None  # 5 <= x < 9 is not empty
    assert ts.make("or", ("$", "$", ()), (inside, empty), (4,)) == inside
    assert ts.make("and", ("$", "$", ()), (inside, empty), (4,)) == empty
    zero = ts.make("scale", (Fraction(0),), (inside,), (4,))
    assert masks.fill_of(ts, zero) == 0
    assert ts.make("add", ("$", "$", ()), (x, zero), (4,)) == x  # x + 0*m is x
    three = ts.make("scale", (Fraction(3),), (empty,), (4,))  # 3 * false is 0
    assert ts.make("add", ("$", "$", ()), (x, three), (4,)) == x


def _blocks_reassembled(x, order):
    """x (4, 6): row blocks of each column half, concatenated along rows in the column halves'
    order, then put back side by side: the identity when `order` keeps the halves in place."""
    halves = [x[:, :3], x[:, 3:]]
    stacked = torch.cat([torch.cat([halves[h][:2], halves[h][2:]], 0) for h in order], 0)  # (8, 3)
    return stacked.view(2, 2, 2, 3).permute(1, 2, 0, 3).reshape(4, 6)


def test_blocks_of_different_columns_stacked_and_reassembled_are_the_tensor():
    """A cat of pieces of one term selected on other dims (an all_to_all's receive buffer)
    is a map of positions; the views that reassemble it compose back to the plain tensor."""
    x = torch.randn(4, 6)
    assert _check(lambda x: x * 2, lambda x: _blocks_reassembled(x * 2, (0, 1)), x=x).status == "verified"
    assert _check(lambda x: x * 2, lambda x: _blocks_reassembled(x * 2, (1, 0)), x=x).status == "violation"


def test_as_strided_window_of_a_flat_buffer():
    """x * 2 flattened between other values, cut back out with as_strided (contiguous strides)."""
    def pieces(x, offset):
        y = x * 2
        buf = torch.cat([y[:4].reshape(-1), torch.zeros(5), y[4:].reshape(-1), x[:, 0] * 3])
        return torch.cat([torch.as_strided(buf, (4, 3), (3, 1), 0), torch.as_strided(buf, (4, 3), (3, 1), offset)])
    assert _check(lambda x: x * 2, lambda x: pieces(x, 17)).status == "verified"
    assert _check(lambda x: x * 2, lambda x: pieces(x, 16)).status == "violation"


def test_selection_across_pieces_of_one_tensor_joins_them():
    """Positions spanning several pieces of a concatenation, each piece a part of one
    tensor: the selection is that tensor (FSDP's per-rank shards of a parameter, between
    other parameters' shards in the all-gather buffer)."""
    def gathered(x, start):
        y = x * 2
        buf = torch.cat([y[:4].reshape(-1), x[:, 0] * 3, y[4:].reshape(-1), x[:, 1] * 3]).view(2, 20)
        return buf[:, start:start + 12].reshape(8, 3)
    assert _check(lambda x: x * 2, lambda x: gathered(x, 0)).status == "verified"
    assert _check(lambda x: x * 2, lambda x: gathered(x, 1)).status == "violation"


def test_rows_of_a_chunked_concatenation_are_the_pieces_chunks():
    """FSDP's reduce-scatter buffer: each tensor cut into 2 row chunks, chunk i of every
    tensor concatenated into row i; a row's flat slice at a tensor's offset is its chunk."""
    def chunk_cat(x, offset):
        buf = torch.cat([(x * 2).reshape(2, 12), (x[:, 0] * 3).reshape(2, 4)], 1).reshape(32)
        return torch.cat([buf[16 * r + offset:16 * r + offset + 12].view(4, 3) for r in range(2)])
    assert _check(lambda x: x * 2, lambda x: chunk_cat(x, 0)).status == "verified"
    assert _check(lambda x: x * 2, lambda x: chunk_cat(x, 4)).status == "violation"


def test_leaf_terms_of_different_shapes_are_different_values():
    """A fill of zeros as (1,) and as (1, 1) are two values (FSDP pads 1-d and 2-d shards
    with zeros in one program): hash-consing a leaf must key on its shape."""
    from shardproof.algebra.terms import TermStore
    ts = TermStore()
    assert ts.make("fill", (0,), (), (1,)) != ts.make("fill", (0,), (), (1, 1))
    assert ts.make("fill", (0,), (), (1,)) == ts.make("fill", (0,), (), (1,))
