"""Issue 18: the temporal checks give no finding on any correct program of the zoo.

In ``make test`` the verified reports of the correct programs assert it (``temporal`` checked,
no finding): every forward model (tests/test_zoo.py), every dp x tp training step
(tests/test_training.py), the proved context-parallel programs (tests/test_context_parallel.py),
the pipeline steps (tests/test_pipeline.py, test_pipelining.py, test_pp_*.py, test_fourd.py,
test_pipeline_mesh.py). This file is the whole matrix (sweep): every correct case file of
``zoo/``, ``zoo/cp/`` and ``zoo/train/`` -- forward and training, the hand-written pipelines, the
``torch.distributed.pipelining`` cases at each of their schedules, the CP programs, and the
correct programs whose verdict is still unknown -- captured at its smallest world size (its
smallest mesh), each rank's recorded events complete and the happens-before check clean."""
import importlib
import os

import pytest

from conftest import ZOO

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")

from shardproof.zoo import catalogue, entry_name  # noqa: E402

SCHEDULED = {"pp_traced": ("gpipe", "1f1b"), "pp_inferred_shapes": ("1f1b", "interleaved_1f1b")}  # as their tests


def _correct_cases():
    """(id, module name, world, case kwargs) of every correct case file, at its smallest world."""
    out = []
    for path in catalogue(ZOO):
        name = os.path.splitext(os.path.basename(path))[0]
        if f"{os.sep}bugs{os.sep}" in path:
            continue
        module = importlib.import_module(name)
        if hasattr(module, "MESHES"):
            dp, tp = min(module.MESHES, key=lambda m: (m[0] * m[1], m))
            runs = [(dp * tp, {"dp": dp})]
        else:
            runs = [(min(getattr(module, "WORLD_SIZES", (2,))), {})]
        schedules = SCHEDULED.get(name) or (tuple(module.SCHEDULES) if hasattr(module, "SCHEDULES") else None)
        if schedules:
            runs = [(w, {**kw, "schedule": s}) for w, kw in runs for s in schedules]
        for world, kw in runs:
            label = f"{entry_name(path)}-w{world}" + (f"-{kw['schedule']}" if "schedule" in kw else "")
            out.append(pytest.param(name, world, kw, id=label))
    return out


CASES = _correct_cases()


@pytest.mark.sweep
@pytest.mark.parametrize("name,world,kw", CASES)
def test_correct_zoo_program_has_no_temporal_finding(name, world, kw):
    from shardproof.api import prepare
    from shardproof.engine.temporal import check
    case = importlib.import_module(name).case(world, **kw)
    meta = case.meta or {}
    assert not (meta.get("bug") or meta.get("unknown_op") or meta.get("pending")), meta
    ranks = [g.events for g in prepare(case, world).dist.graphs]
    assert all(r is not None and r.complete for r in ranks), [r.notes for r in ranks if r is not None]
    assert check(ranks).findings == []


def test_matrix_spans_forward_training_pipeline_and_cp():
    """The matrix is built from the files (a new correct case joins it): it holds forward
    models, dp x tp steps, hand-written and torch.distributed.pipelining pipelines at every
    schedule, and ring attention and Ulysses."""
    ids = [p.id for p in CASES]
    for part in ("tp_mlp-", "train/tp_mlp_train-", "train/pipeline_mlp_1f1b-", "train/pipeline_llama_3d-",
                 "train/pipeline_llama_3d_interleaved-", "train/pipeline_llama_4d-", "cp/cp_ring_attention_balanced-",
                 "cp/cp_ulysses-", "train/ulysses_gqa_train-"):
        assert any(i.startswith(part) for i in ids), part
    for schedule in importlib.import_module("pp_schedules").SCHEDULES:
        assert f"train/pp_schedules-w2-{schedule}" in ids and f"train/pp_llama_schedules-w2-{schedule}" in ids
    assert not any("bugs/" in i for i in ids)
