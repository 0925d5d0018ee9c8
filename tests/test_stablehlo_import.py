"""StableHLO text import without JAX: a stored shard_map lowering (tests/data, made by
``jax.jit(...).lower(...).as_text(debug_info=True)``) parses to one graph per rank, and
every prefix of it -- a truncated file -- is a DumpError or a graph, never a traceback."""
import os

import pytest

from shardproof.frontends.fx_text import DumpError
from shardproof.frontends.stablehlo_text import is_stablehlo_text, load_stablehlo_program

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "tp_attention.shard_map.mlir")


@pytest.fixture(scope="module")
def text():
    with open(DATA, encoding="utf-8") as f:
        return f.read()


def test_shard_map_module_is_one_graph_per_rank_with_collectives(text):
    assert is_stablehlo_text(text)
    graphs = load_stablehlo_program(text, 2, "attention.mlir")
    assert len(graphs) == 2
    assert [n.name for n in graphs[0].inputs] == [n.name for n in graphs[1].inputs]
    reduces = [n for n in graphs[0].nodes if n.op == "_c10d_functional.all_reduce"]
    assert reduces and reduces[0].args[-1] == (0, 1)
    assert any(n.source is not None for n in graphs[0].nodes), "locations become source lines"


def test_every_prefix_is_a_graph_or_a_dump_error(text):
    for end in range(0, len(text), 7):
        try:
            load_stablehlo_program(text[:end], 2, "cut.mlir")
        except DumpError as exc:
            assert str(exc).startswith("cut.mlir"), exc


def test_cli_verifies_stablehlo_files_and_finds_a_dropped_all_reduce(tmp_path, capsys):
    """`shardproof verify` takes StableHLO text too (single device, and a shard_map module
    run once per partition); returning the partial product instead of its psum is a
    Partial output (recoverable only by a reduction the module does not contain: unknown
    unless allowed), and a violation at the contraction where the output must be replicated."""
    from shardproof.cli import main
    seq = os.path.join(os.path.dirname(DATA), "tp_attention.single.mlir")
    assert main(["verify", "--seq", seq, "--dist", DATA, "--auto-relations"]) == 0
    with open(DATA, encoding="utf-8") as f:
        text = f.read()
    dropped = tmp_path / "dropped.mlir"
    dropped.write_text(text.replace("sdy.return %25 :", "sdy.return %24 :"))
    out = tmp_path / "r.json"
    assert main(["verify", "--seq", seq, "--dist", str(dropped), "--auto-relations", "--json", str(out)]) == 2
    import json
    assert json.loads(out.read_text())["outputs"][0]["holds"] == 'Partial("sum")'
    assert main(["verify", "--seq", seq, "--dist", str(dropped), "--auto-relations", "--allow-partial-outputs",
                 "--json", str(out)]) == 0
    assert json.loads(out.read_text())["partial_outputs"] == ["out0"]
    assert main(["verify", "--seq", seq, "--dist", str(dropped), "--auto-relations", "--expect", "out0=Replicate()",
                 "--json", str(out)]) == 1
    finding = json.loads(out.read_text())["findings"][0]
    assert (finding["op"], finding["kind"]) == ("xla.dot_general", "partial-sum-never-reduced"), finding
