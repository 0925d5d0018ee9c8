"""JAX programs (shard_map over host devices) lowered to StableHLO and imported: the MLP,
attention and sequence-parallel cases verify at TP 2 and 4; a dropped psum and a wrong
all_gather axis are violations at the op."""
import importlib.util
import os
import sys

import pytest

from shardproof.frontends.jax_lower import host_devices

host_devices(8)  # before jax is first imported (importorskip imports it)
pytest.importorskip("jax", reason="jax is not installed (pip install shardproof[jax])")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JAX = os.path.join(ROOT, "examples", "jax")
sys.path.append(JAX)  # the case files import jax_models

from shardproof.api import verify_case  # noqa: E402
from shardproof.cli import main  # noqa: E402


def _case(path, world):
    spec = importlib.util.spec_from_file_location("jax_case_" + os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.case(world)


@pytest.mark.parametrize("name", ["jax_tp_mlp", "jax_tp_attention", "jax_sp_mlp"])
@pytest.mark.parametrize("world", [2, 4])
def test_parallel_programs_verified(name, world):
    import jax
    if len(jax.devices("cpu")) < world:
        pytest.skip(f"jax was imported with {len(jax.devices('cpu'))} host devices before this test")
    report = verify_case(_case(os.path.join(JAX, name + ".py"), world))
    assert report.status == "verified" and report.strength == "proof", report.reason


def test_dropped_psum_is_a_partial_sum_never_reduced():
    report = verify_case(_case(os.path.join(JAX, "bugs", "mlp_missing_psum.py"), 4))
    assert report.status == "violation"
    f = report.findings[0]
    assert (f.node, f.op, f.rank, f.kind) == ("dot_general.3", "xla.dot_general", [0, 1, 2, 3],
                                              "partial-sum-never-reduced")
    assert f.source.endswith("models.py:25")


def test_wrong_all_gather_axis_is_a_violation_at_the_gather():
    report = verify_case(_case(os.path.join(JAX, "bugs", "sp_wrong_all_gather_axis.py"), 4))
    assert report.status == "violation"
    f = report.findings[0]
    assert (f.node, f.op, f.rank, f.kind) == ("all_gather.1", "xla.all_gather", [0, 1, 2, 3], "wrong-dim")


def test_cli_exit_codes(capsys):
    assert main(["verify", os.path.join(JAX, "jax_tp_mlp.py")]) == 0
    assert main(["verify", os.path.join(JAX, "bugs", "mlp_missing_psum.py")]) == 1
    capsys.readouterr()
