"""Derived input relations: tensors a rank holds as a *function* of single-device ids, not
as a layout of them. Backward graphs take the forward's vocab-parallel masks as saved
inputs -- each rank's ids local to its vocabulary block (``LocalIds``) and the
out-of-block masks (``OutsideBlock``) -- and only these relations let the gradients that
read them relate (Megatron's bw dumps)."""
import numpy as np
import pytest

from test_dump_cli import cli, dump, write
from shardproof.api import verify_dumps
from shardproof.relations.spec import LocalIds, OutsideBlock, RelationError, parse_relation

VOCAB, TOKENS = 8, 6


def _seq(with_mask: bool) -> str:
    """The single-device lookup; with a mask input, it also zeroes the rows its own
    whole-vocabulary mask marks (as Megatron's TP 1 cross-entropy does)."""
    params = f'w: "f32[{VOCAB}, 4]", ids: "i64[{TOKENS}]"' + (f', m: "b8[{TOKENS}]"' if with_mask else "")
    body = f'emb: "f32[{TOKENS}, 4]" = torch.ops.aten.embedding.default(w, ids)\n'
    if with_mask:
        body += (f'unsqueeze: "b8[{TOKENS}, 1]" = torch.ops.aten.unsqueeze.default(m, -1)\n'
                 f'out: "f32[{TOKENS}, 4]" = torch.ops.aten.masked_fill.Scalar(emb, unsqueeze, 0.0)\nreturn (out,)')
    else:
        body += "return (emb,)"
    return dump(params, body)


def _rank(masked: bool = True, reduced: bool = True) -> str:
    """A rank of a vocab-parallel lookup reading its saved local ids and mask."""
    rows = VOCAB // 2
    body = [f'emb: "f32[{TOKENS}, 4]" = torch.ops.aten.embedding.default(w, local)', "x = emb"]
    if masked:
        body += [f'unsqueeze: "b8[{TOKENS}, 1]" = torch.ops.aten.unsqueeze.default(mask, -1)',
                 "# File: model.py:7 in forward, code: out[mask] = 0",
                 f'out: "f32[{TOKENS}, 4]" = torch.ops.aten.masked_fill.Scalar(emb, unsqueeze, 0.0)', "x = out"]
    if reduced:
        body += [f"all_reduce: \"f32[{TOKENS}, 4]\" = torch.ops._c10d_functional.all_reduce.default({body[-1][4:]}, "
                 f"'sum', '0')",
                 f'wait: "f32[{TOKENS}, 4]" = torch.ops._c10d_functional.wait_tensor.default(all_reduce)', "x = wait"]
    result = body[-1][4:]
    lines = [ln for ln in body if not ln.startswith("x = ")] + [f"return ({result},)"]
    return dump(f'w: "f32[{rows}, 4]", local: "i64[{TOKENS}]", mask: "b8[{TOKENS}]"', "\n".join(lines))


def _pair(tmp_path, seq_mask=False, **bug):
    seq = write(tmp_path / "tp1", {"fw.g0.r0.py": _seq(seq_mask)})
    dist = write(tmp_path / "tp2", {f"fw.g0.r{r}.py": _rank(**bug) for r in range(2)})
    mask_of = ("{of: m, relation: 'OutsideBlock(%d, ids=ids)'}" if seq_mask else
               "{of: ids, relation: OutsideBlock(%d)}") % VOCAB
    rel = tmp_path / "rel.yaml"
    rel.write_text(f"inputs:\n  w: Shard(0)\n  local: {{of: ids, relation: LocalIds({VOCAB})}}\n  mask: {mask_of}\n")
    return seq, dist, str(rel)


def test_relations_parse_and_print():
    assert parse_relation("LocalIds(98304)") == LocalIds(98304)
    assert parse_relation("OutsideBlock(16, ids=view_26)") == OutsideBlock(16, "view_26")
    assert str(OutsideBlock(16, "view_26")) == "OutsideBlock(16, ids='view_26')"


def test_each_rank_holds_its_blocks_local_ids_and_mask():
    """The derivations compute Megatron's formulas: ids - lo inside [lo, hi), 0 and
    True outside (blocks as Shard cuts range(size))."""
    from shardproof.engine.numeric import derive
    from shardproof.ir.graph import TensorType
    ids = np.array([0, 3, 4, 7, 5])
    ty = TensorType((5,), "i64")
    local = [derive(LocalIds(8).derivation(ty, ty, r, 2), {"ids": ids}) for r in range(2)]
    outside = [derive(OutsideBlock(8).derivation(ty, ty, r, 2), {"ids": ids}) for r in range(2)]
    assert [list(v) for v in local] == [[0, 3, 0, 0, 0], [0, 0, 0, 3, 1]]
    assert [list(v) for v in outside] == [[False, False, True, True, True], [True, True, False, False, False]]


@pytest.mark.parametrize("seq_mask", [False, True], ids=["ids", "whole-range-mask"])
def test_vocab_parallel_lookup_from_saved_masks_verifies(tmp_path, seq_mask):
    report = verify_dumps(*_pair(tmp_path, seq_mask), kind="fw")
    assert report.status == "verified", report.findings or report.outputs
    assert [o.holds for o in report.outputs] == ["Replicate()"]


@pytest.mark.parametrize("bug,output,where,op,kind", [
    ({"reduced": False}, "out", "out", "aten.masked_fill", "partial-sum-never-reduced"),
    # the rows a rank does not own are summed in: the all_reduce of unmasked local lookups
    ({"masked": False}, "wait", "all_reduce", "_c10d_functional.all_reduce", "value-mismatch"),
], ids=["missing-all_reduce", "rows-outside-the-block-not-zeroed"])
def test_bugs_reading_saved_masks_are_violations(tmp_path, bug, output, where, op, kind):
    report = verify_dumps(*_pair(tmp_path, **bug), kind="fw", expect={output: "Replicate() of emb"})
    assert report.status == "violation", report.findings or report.outputs
    f = report.findings[0]
    assert (f.node, f.op, f.rank, f.kind) == (where, op, [0, 1], kind)
    assert f.counterexample["single_device"] != f.counterexample["distributed"]


def test_ids_that_do_not_exist_or_do_not_fit_are_bad_input(tmp_path, capsys):
    seq, dist, rel = _pair(tmp_path)
    text = open(rel).read()
    open(rel, "w").write(text.replace("{of: ids, relation: OutsideBlock(8)}", "{of: w, relation: OutsideBlock(8)}"))
    with pytest.raises(RelationError, match="one id per element"):  # w [8, 4] are not the mask's ids
        verify_dumps(seq, dist, relations_file=rel, kind="fw")
    open(rel, "w").write(text.replace("{of: ids, relation: OutsideBlock(8)}", "'OutsideBlock(8, ids=nope)'"))
    code, out, err = cli(capsys, "--seq", seq, "--dist", dist, "--relations", rel)
    assert code == 3 and "'nope'" in err and "Traceback" not in err
