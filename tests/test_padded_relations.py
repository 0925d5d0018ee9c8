"""The Padded relation (issue 15): a placement of the single-device tensor lengthened by zero
padding, with blocks repeated in place (GQA's KV heads repeated to the query heads)."""
import numpy as np
import pytest

from shardproof.relations.spec import Mesh, Padded, RelationError, Replicate, Shard, held, parse_relation

TP6_QKV = "Padded(Interleaved(1, [2304, 2304, 2304]), 1, [[2048, 2304], [512, 2304, 4], [512, 2304, 4]], unit=64)"


def test_parse_round_trips_and_local_shapes():
    rel = parse_relation(TP6_QKV)
    assert isinstance(rel, Padded) and str(parse_relation(str(rel))) == str(rel)
    assert str(parse_relation("Padded(Shard(1), 1, [8192, 8196])")) == "Padded(Shard(1), 1, [[8192, 8196]])"
    assert [rel.local_shape((2048, 3072), r, 6) for r in range(6)] == [(2048, 1152)] * 6
    ffn = parse_relation("Padded(Shard(1), 1, [[8192, 8196]])")
    assert ffn.local_shape((2048, 8192), 5, 6) == (2048, 1366) and ffn.padding() == 4


def test_tp6_fused_qkv_layout_heads():
    """Rank 5 holds query heads 30, 31 and four zero heads; key heads 7, 7 (each KV head
    repeated 4 times: heads 28..31 of the repeated 32 are KV head 7) and four zero heads."""
    (_, cols) = parse_relation(TP6_QKV).layout((2048, 3072), 5, 6)
    heads = cols.reshape(3, 6, 64)[:, :, 0] // 64  # per segment, the first column of each head / 64
    assert heads[0].tolist() == [30, 31, 48, 49, 50, 51]
    assert (cols.reshape(3, 6, 64)[0, 2:] >= 3072).all()  # query padding: past the end, zero
    assert heads[1][:2].tolist() == [32 + 7, 32 + 7] and heads[2][:2].tolist() == [40 + 7, 40 + 7]
    (_, cols0) = parse_relation(TP6_QKV).layout((2048, 3072), 0, 6)
    assert (cols0.reshape(3, 6, 64)[1, :, 0] // 64).tolist() == [32, 32, 32, 32, 33, 33]


def test_held_reads_padding_as_zero():
    x = np.arange(1, 11, dtype=float).reshape(2, 5)
    rel = parse_relation("Padded(Shard(1), 1, [[5, 6]])")
    assert held(x, rel.layout(x.shape, 2, 3)).tolist() == [[5, 0], [10, 0]]
    rep = parse_relation("Padded(Shard(1), 1, [[5, 12, 2]])")  # each column twice, then two zeros
    assert np.concatenate([held(x, rep.layout(x.shape, r, 2)) for r in range(2)], 1)[0].tolist() == \
        [1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 0, 0]


@pytest.mark.parametrize("text", ["Padded(Shard(1), 1, [[5, 4]])", "Padded(Shard(1), 1, [[4, 6]])",
                                  "Padded(Shard(1), 1, [[5, 6, 2]])", "Padded(Replicate(), 3, [[5, 6]])",
                                  "Padded(Shard(1), 1, [[5, 6]], unit=2)"])
def test_bad_padding_is_a_relation_error(text):
    with pytest.raises(RelationError):
        parse_relation(text).layout((2, 5), 0, 2)


def test_a_mesh_does_not_place_padding():
    with pytest.raises(RelationError):
        Mesh((2, 2), (Shard(0), Padded(Replicate(), 1, ((5, 6),)))).layout((4, 5), 0, 4)
