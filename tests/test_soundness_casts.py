"""Soundness classes 1, 4 and 6 of issue 14: value-changing casts, extents of constant fills
and broadcast dims, and conventions checked on the graph (as_strided's base). Every program
pair in tests/cases/soundness/ is labelled by running it on a real gloo process group
against the single-device program; a buggy one must be a violation at the op that breaks
the relation, a correct one verified (or honestly unknown), never the reverse."""
import importlib
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

from gloo import gloo_outputs_of, variant_agrees  # noqa: E402
from shardproof.api import prepare, verify_prepared  # noqa: E402
from shardproof.ops.registry import lookup  # noqa: E402

CASES = os.path.join(os.path.dirname(__file__), "cases", "soundness")
sys.path.insert(0, CASES)
MODULES = ["casts", "fills", "strided"]
WORLDS = (2, 3)


def _mod(name):
    return importlib.import_module(name)


@pytest.fixture(scope="module")
def executed():
    """(module, world) -> the ranks' outputs of every variant, from one gloo run per world size."""
    cache = {}

    def get(module, world):
        if (module, world) not in cache:  # every module at that world size: one gloo run
            for m, outs in gloo_outputs_of(CASES, {m: _mod(m).VARIANTS for m in MODULES}, "build", world).items():
                cache[m, world] = outs
        return cache[module, world]
    return get


PAIRS = [pytest.param(m, v, w, id=f"{m}-{v}-w{w}") for m in MODULES for v in _mod(m).VARIANTS for w in WORLDS]


@pytest.mark.parametrize("module,variant,world", PAIRS)
def test_pair_verdict_matches_execution(executed, module, variant, world):
    mod = _mod(module)
    case = mod.build(world, variant)
    outs = [r[variant] for r in executed(module, world)]
    correct = variant_agrees(case, outs, case.expect["out"])
    assert correct != case.meta["buggy"], f"label of {variant} contradicted by gloo execution"
    report = verify_prepared(prepare(case, world))
    if correct:
        assert report.status in ("verified", "unknown"), (report.status, report.findings)
        if variant not in getattr(mod, "UNKNOWN_OK", ()):  # the rules cover these: a proof is expected
            assert report.status == "verified", report.reason
        elif report.status == "unknown":  # honest: it names the op where it stopped
            assert "aten." in report.reason, report.reason
    else:
        assert report.status == "violation", (report.status, report.reason)
        finding = report.findings[0]
        assert finding.op in mod.BUG_OPS[variant], finding
        assert finding.rank == list(range(world)), finding


TORCH_DTYPES = {"i8": torch.int8, "u8": torch.uint8, "i16": torch.int16, "i32": torch.int32, "i64": torch.int64,
                "b8": torch.bool, "f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16}


def _samples():
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(64, generator=g) * 3, torch.randn(16, generator=g) * 1e4,
                   torch.tensor([0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 2.5, 127.9, -128.9, 255.5, 1e10, -1e10,
                                 float("nan"), float("inf"), -float("inf")])]).double()
    n = torch.cat([torch.randint(-2 ** 40, 2 ** 40, (32,), generator=g), torch.randint(-300, 300, (32,), generator=g)])
    return {"f64": x, "i64": n, "b8": x.abs() > 1}


@pytest.mark.parametrize("dst", list(TORCH_DTYPES))
@pytest.mark.parametrize("src", ["f64", "i64", "b8"])
def test_cast_numerics_agree_with_torch(src, dst):
    x = _samples()[src]
    want = x.to(TORCH_DTYPES[dst])
    for op, args, kwargs in [("aten._to_copy", (), {"dtype": dst}), ("prims.convert_element_type", (dst,), {})]:
        got = np.asarray(lookup(op).numerics(x.numpy(), *args, **kwargs))
        w = want.double().numpy() if want.is_floating_point() else want.numpy()
        assert np.array_equal(got.astype(w.dtype) if got.dtype.kind != "f" else got, w, equal_nan=True) \
            or (dst in ("f32", "bf16") and np.allclose(got, x.double().numpy(), equal_nan=True)), (op, src, dst)
    if dst != "b8" and not TORCH_DTYPES[dst].is_floating_point:
        other = torch.zeros(1, dtype=torch.int64)
        assert np.array_equal(lookup("aten.type_as").numerics(x.numpy(), other.numpy()), x.type_as(other).numpy())


@pytest.mark.parametrize("name", ["round", "floor", "ceil", "trunc", "frac"])
def test_rounding_numerics_agree_with_torch(name):
    x = _samples()["f64"]
    got = lookup("aten." + name).numerics(x.numpy())
    assert np.allclose(got, getattr(torch, name)(x).numpy(), equal_nan=True)
    n = _samples()["i64"][32:]
    if name != "frac":
        assert np.array_equal(lookup("aten." + name).numerics(n.numpy()), getattr(torch, name)(n).numpy())


def test_value_preserving_casts_are_the_identity_and_others_are_terms():
    from shardproof.ops.casts import preserves
    assert preserves("f32", "f64") and preserves("bf16", "f32") and preserves("i32", "i64")
    assert not preserves("f64", "bf16") and not preserves("f32", "f16") and not preserves("bf16", "f16")
    assert preserves("b8", "i8") and preserves("u8", "i16") and preserves("i64", "f32")
    assert not preserves("f32", "i64") and not preserves("f32", "b8") and not preserves("i64", "i8")
    assert not preserves("i8", "u8") and not preserves("u8", "i8") and not preserves("i32", "b8")


@pytest.mark.parametrize("name", ["bitwise_and", "bitwise_or", "bitwise_xor"])
def test_bitwise_numerics_agree_with_torch_on_ints_and_bools(name):
    g = torch.Generator().manual_seed(1)
    a, b = torch.randint(-50, 50, (40,), generator=g), torch.randint(-50, 50, (40,), generator=g)
    f = lookup("aten." + name).numerics
    for x, y in [(a, b), (a > 0, b > 0)]:
        assert np.array_equal(f(x.numpy(), y.numpy()), getattr(torch, name)(x, y).numpy())
    assert np.array_equal(lookup("aten.bitwise_not").numerics(a.numpy()), torch.bitwise_not(a).numpy())


def test_a_failed_check_is_unknown_naming_the_op_and_reason():
    """as_strided reading storage outside its input view's elements: the op's check fails
    on that node, so the verdict is unknown (never verified), naming the op and why."""
    mod = _mod("strided")
    report = verify_prepared(prepare(mod.build(2, "reads_before_view"), 2))
    assert report.status == "unknown"
    assert "aten.as_strided" in report.reason and "outside its input's elements" in report.reason


def test_captured_types_carry_eager_strides_and_offsets_outside_equality():
    from shardproof.ir.graph import TensorType
    assert TensorType((2, 3), "f32", (1, 2), 5) == TensorType((2, 3), "f32")
    assert hash(TensorType((2, 3), "f32", (1, 2), 5)) == hash(TensorType((2, 3), "f32"))
    p = prepare(_mod("strided").build(2, "offset_absolute_ok"), 2)
    view = next(n for n in p.dist.graphs[1].nodes if n.op == "aten.slice")
    assert view.type.strides == (12, 4, 1) and view.type.offset == 4  # x[:, 1:] of a [3, 3, 4] shard
    t = next(n for n in prepare(_mod("strided").build(2, "transposed_storage"), 2).dist.graphs[0].nodes
             if n.op == "aten.transpose")
    assert t.type.strides == (12, 1, 4)


def test_every_declared_check_runs_on_its_op():
    """Ops with a check: as_strided and its scatter (the conventions their rules rely on)."""
    from shardproof.ops.registry import REGISTRY, load_builtin
    load_builtin()
    checked = {name for name, d in REGISTRY.items() if d.check is not None}
    assert {"aten.as_strided", "aten.as_strided_scatter"} <= checked


@pytest.mark.parametrize("view", ["contiguous", "transposed", "sliced", "permuted_slice", "expanded"])
def test_as_strided_numerics_read_storage_as_torch_does(view):
    base = torch.arange(60, dtype=torch.float64).reshape(3, 4, 5)
    v = {"contiguous": base, "transposed": base.transpose(1, 2), "sliced": base[:, 1:],
         "permuted_slice": base.permute(2, 0, 1)[1:], "expanded": base[:1, :1, :].expand(3, 4, 5)}[view]
    layout = (tuple(v.stride()), v.storage_offset())
    held = set(v.flatten().tolist())  # storage positions (= values here) the view's elements occupy
    compared = 0
    for size, stride, offset in [((2, 3), (5, 1), None), ((4,), (3,), None), ((2, 2), (1, 20), 5), ((2,), (20,), 21),
                                 ((5,), (1,), None)]:
        off = v.storage_offset() if offset is None else offset
        want = torch.as_strided(v, size, stride, off)
        if not set(want.flatten().tolist()) <= held:
            continue  # reads outside the view's elements: the check refuses these (unknown)
        got = lookup("aten.as_strided").numerics(v.contiguous().numpy(), list(size), list(stride), offset,
                                                 base_layout=layout)
        assert np.array_equal(got, want.numpy()), (view, size, stride, offset)
        compared += 1
    assert compared
