"""Relations: parsing, layouts, inference by value (Shard/Replicate/Slices/Interleaved/GQA)
and by shape, and clear errors for inconsistent specs."""
import numpy as np
import pytest

from shardproof.relations import Interleaved, Partial, Replicate, Shard, Slices, parse_relation
from shardproof.relations.infer import (load_yaml, parse_spec, relation_by_shape, relation_by_value,
                                        resolve_inputs, resolve_outputs)
from shardproof.relations.spec import RelationError, chunk_bounds


def pieces(whole, rel, world):
    out = []
    for r in range(world):
        vecs = rel.layout(whole.shape, r, world)
        out.append(whole[np.ix_(*[np.arange(s) if v is None else v for s, v in zip(whole.shape, vecs)])])
    return out


@pytest.mark.parametrize("text,rel", [
    ("Replicate()", Replicate()), ("repl", Replicate()), ("Shard(1)", Shard(1)), ("cat 0", Shard(0)),
    ('Partial("avg")', Partial("avg")), ("Interleaved(0, [8, 4, 4])", Interleaved(0, (8, 4, 4))),
    ("Interleaved(0, [8, 2, 2], blocks=[4, 1, 1])", Interleaved(0, (8, 2, 2), (4, 1, 1))),
])
def test_parse(text, rel):
    assert parse_relation(text) == rel


@pytest.mark.parametrize("text", ["Shard(x)", "Nope()", "Partial('mul')", "import os"])
def test_parse_errors(text):
    with pytest.raises(RelationError):
        parse_relation(text)


def test_chunk_bounds_uneven():
    assert [chunk_bounds(10, 4, r) for r in range(4)] == [(0, 3), (3, 6), (6, 9), (9, 10)]


@pytest.mark.parametrize("world", [2, 3, 4, 6, 8])
@pytest.mark.parametrize("rel", [Replicate(), Shard(0), Shard(1)])
def test_value_inference_simple(world, rel):
    whole = np.random.default_rng(world).normal(size=(24, 48))
    assert relation_by_value(whole, pieces(whole, rel, world)) == rel


@pytest.mark.parametrize("world", [2, 4, 8])
def test_value_inference_interleaved_qkv(world):
    whole = np.random.default_rng(0).normal(size=(48, 16))
    rel = Interleaved(0, (16, 16, 16))
    assert relation_by_value(whole, pieces(whole, rel, world)) == rel


@pytest.mark.parametrize("world", [2, 4, 8])
def test_value_inference_gqa_blocks(world):
    # 8 query heads, 2 kv heads of size 2: kv blocks are shared by world/2 ranks
    whole = np.random.default_rng(1).normal(size=(16 + 4 + 4, 6))
    rel = Interleaved(0, (16, 4, 4), None if world == 2 else (world, 2, 2))
    found = relation_by_value(whole, pieces(whole, rel, world))
    assert [np.array_equal(a, b) for a, b in zip(pieces(whole, found, world), pieces(whole, rel, world))] == [True] * world


def test_value_inference_shifted_shard_is_slices():
    whole = np.random.default_rng(2).normal(size=(8, 4))
    shifted = [whole[4:8], whole[0:4]]
    assert relation_by_value(whole, shifted) == Slices(0, {0: (4, 8), 1: (0, 4)})


def test_value_inference_none_for_foreign_values():
    whole = np.random.default_rng(3).normal(size=(8, 4))
    assert relation_by_value(whole, [whole[:4] + 1, whole[4:]]) is None


def test_shape_inference():
    assert relation_by_shape((8, 4), [(8, 4), (8, 4)]) == Replicate()
    assert relation_by_shape((8, 4), [(8, 2), (8, 2)]) == Shard(1)
    assert relation_by_shape((8, 4), [(8, 3), (8, 1)]) is None


def test_spec_globs_and_of(tmp_path):
    f = tmp_path / "rel.yaml"
    f.write_text('inputs:\n  "*.weight": Shard(0)\n  x_local: {of: x, relation: Shard(1)}\n')
    spec = load_yaml(str(f)).inputs
    rels = resolve_inputs({"a.weight": (4, 2), "x": (2, 4)}, [{"a.weight": (2, 2), "x_local": (2, 2)}] * 2, spec)
    assert rels["a.weight"].relation == Shard(0) and rels["x_local"].seq_name == "x"


def test_relations_file_sections(tmp_path):
    f = tmp_path / "rel.yaml"
    f.write_text("inputs:\n"
                 "  w: Replicate()\n"
                 "  x_hi: {of: x, relation: 'Slices(0, {0: (4, 8)})'}\n"
                 "expect:\n"
                 "  loss: Replicate()\n"
                 "  total_2: Replicate() of total\n"
                 "constants:\n"
                 "  _tensor_constant0: 0\n"
                 "  _tensor_constant1: {seq: 0.5, dist: 0.25}\n")
    rf = load_yaml(str(f))
    assert rf.inputs["x_hi"].seq_name == "x" and rf.inputs["x_hi"].relation == Slices(0, {0: (4, 8)})
    assert rf.inputs["x_hi"].where == f"{f}:3"
    assert rf.expect["loss"] == (None, Replicate(), f"{f}:5")
    assert rf.expect["total_2"].seq_name == "total"
    assert rf.constants == {"seq": {"_tensor_constant0": 0, "_tensor_constant1": 0.5},
                            "dist": {"_tensor_constant0": 0, "_tensor_constant1": 0.25}}


@pytest.mark.parametrize("text,needle", [
    ("inputs: {}\noutputs: {}\n", "unknown section 'outputs'"),
    ("constants:\n  c: one\n", "must be a number"),
    ("constants:\n  c: {seq: 1, rank0: 2}\n", "{seq: n, dist: n}"),
    ("expect:\n  y: {of: x}\n", "must be a relation or"),
])
def test_relations_file_errors_name_file_and_line(tmp_path, text, needle):
    f = tmp_path / "rel.yaml"
    f.write_text(text)
    with pytest.raises(RelationError) as info:
        load_yaml(str(f))
    assert needle in str(info.value) and str(info.value).startswith(f"{f}:")


def test_spec_error_names_the_entry_line(tmp_path):
    f = tmp_path / "rel.yaml"
    f.write_text("inputs:\n  x: Replicate()\n  y: Shard(0)\n")
    with pytest.raises(RelationError, match=r"rel.yaml:3: the relations name 'y'"):
        resolve_inputs({"x": (2,)}, [{"x": (2,)}], load_yaml(str(f)).inputs)


def test_outputs_by_name_then_position():
    # the same name on both sides wins; the rest pair by position with what is left
    pairs = resolve_outputs(["loss", "a", "b"], [["loss", "c", "b"]] * 2)
    assert pairs == {"loss": ("loss", None), "a": ("c", None), "b": ("b", None)}
    assert resolve_outputs(["add_1"], [["add_3"]]) == {"add_1": ("add_3", None)}
    with pytest.raises(RelationError, match="no distributed counterpart"):
        resolve_outputs(["loss", "a"], [["loss"]])
    with pytest.raises(RelationError, match="a have no distributed counterpart"):  # lists of other lengths
        resolve_outputs(["loss", "a"], [["loss", "saved", "c"]])


def test_outputs_from_expectations_only():
    expect = parse_spec({"add_3": "Replicate() of add_1", "loss": "Shard(0)"})
    pairs = resolve_outputs(["add_1", "loss", "saved"], [["add_3", "loss", "other"]], expect)
    assert pairs == {"add_1": ("add_3", Replicate()), "loss": ("loss", Shard(0))}
    with pytest.raises(RelationError, match="not every rank returns"):
        resolve_outputs(["loss"], [["loss"], ["x"]], parse_spec({"loss": "Replicate()"}))
    with pytest.raises(RelationError, match="does not return"):
        resolve_outputs(["a"], [["b"]], parse_spec({"b": "Replicate() of c"}))


def test_spec_naming_missing_tensor_is_an_error():
    with pytest.raises(RelationError, match="match no input"):
        resolve_inputs({"x": (2,)}, [{"x": (2,)}], parse_spec({"y": "Replicate()"}))


def test_spec_naming_missing_single_device_tensor_is_an_error():
    with pytest.raises(RelationError, match="does not exist"):
        resolve_inputs({"x": (2,)}, [{"x": (2,)}], parse_spec({"x": ("z", "Replicate()")}))


def test_bad_yaml(tmp_path):
    f = tmp_path / "rel.yaml"
    f.write_text("inputs: [unclosed\n")
    with pytest.raises(RelationError, match="not valid YAML"):
        load_yaml(str(f))


def test_interleaved_sizes_must_sum():
    with pytest.raises(RelationError, match="sum to"):
        Interleaved(0, (4, 4)).layout((10, 2), 0, 2)


def test_mesh_relation_layouts_parse_and_inference():
    """dp x tp placements: rank r sits at (r // tp, r % tp); value matching names them."""
    import numpy as np
    from shardproof.relations import Mesh
    from shardproof.relations.infer import relation_by_value
    from shardproof.relations.spec import held
    w = np.arange(96.0).reshape(12, 8)
    cases = [Mesh((2, 2), (Shard(0), Replicate())), Mesh((2, 2), (Replicate(), Interleaved(0, (4, 4, 4)))),
             Mesh((2, 3), (Replicate(), Shard(1)))]
    for rel in cases:
        world = int(np.prod(rel.shape))
        pieces = [held(w, rel.layout(w.shape, r, world)) for r in range(world)]
        assert relation_by_value(w, pieces) == rel
        assert parse_relation(str(rel)) == rel
    # rank 3 of dp2 x tp2 with the rows split over tp: the second half of the rows
    assert Mesh((2, 2), (Replicate(), Shard(0))).layout(w.shape, 3, 4)[0].tolist() == list(range(6, 12))
    with pytest.raises(RelationError):
        Mesh((2, 2), (Partial(), Replicate())).layout(w.shape, 0, 4)
    with pytest.raises(RelationError):
        Mesh((2, 3), (Replicate(), Shard(0))).layout(w.shape, 0, 4)
