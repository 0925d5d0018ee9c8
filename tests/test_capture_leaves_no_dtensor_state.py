"""A capture leaves no DTensor state behind in the user's process. DTensor caches sharding
plans in a process-wide cache whose keys compare device meshes by shape only (not by process
group or rank); a plan cached while a rank's program was read outside its fake process group
(its parameters' local shards) held that rank's mesh, so DTensor code run later in the same
process -- or in a process forked from it, as the gloo label tests do -- took that rank's
coordinate: a vocab-parallel embedding's backward then gave every rank the last captured
rank's rows (the Hugging Face corpus's training labels failed after the matrix had run)."""
import os

import numpy as np
import pytest
import torch

from gloo import run_fn_on_gloo
from shardproof import api
from shardproof.testing import load_case

ZOO = os.path.join(os.path.dirname(__file__), "..", "src", "shardproof", "zoo")


def _loss(out, w):
    return (out * w).sum()


@pytest.fixture(scope="module")
def verified():
    """The zoo's DTensor vocab-parallel embedding (torchtitan's tok_embeddings plan), verified here."""
    case = load_case(os.path.join(ZOO, "dtensor_vocab_parallel_embedding.py"), 2)
    return case, api.verify_case(case)


def test_capture_leaves_dtensor_caches_empty(verified):
    case, report = verified
    assert report.status == "verified", (report.status, report.reason, report.findings[:1])
    # (hits, misses) since the cache was last cleared: nothing cached since the capture's own clear
    assert torch._C._get_DTensor_sharding_propagator_cache_stats() == (0, 0)
    from torch.distributed.tensor import DTensor
    assert DTensor._op_dispatcher.sharding_propagator.propagate_op_sharding.cache_info().currsize == 0


def test_gloo_backward_after_capture_is_the_single_devices(verified):
    """Forked from this process as is (the parent's state kept: fresh=False), each rank of a
    real gloo group holds its own mesh coordinate and the single device's
    embedding gradient (with the plan leaked, rank 0's parameter took the captured rank 1's mesh)."""
    case, _ = verified
    ids = case.inputs["ids"]
    w = torch.randn(*ids.shape, case.single.weight.shape[1], generator=torch.Generator().manual_seed(3))
    (want,) = torch.autograd.grad(_loss(case.single(ids), w), [case.single.weight])

    def run(rank, world):
        program = case.distributed(rank, world)
        (weight,) = program.parameters()
        (g,) = torch.autograd.grad(_loss(program(ids), w), [weight])
        return weight.device_mesh.get_coordinate(), g.full_tensor().numpy()

    for rank, (coordinate, got) in enumerate(run_fn_on_gloo(run, 2, timeout=120, fresh=False)):
        assert coordinate == (rank,), (rank, coordinate)
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)
