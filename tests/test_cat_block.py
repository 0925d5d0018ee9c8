"""A rank's block of a tensor the single device concatenates (the backward of a chunk: the
gradient of a fused gate/up projection's output) stays a selection of that cat through views
and matmuls (algebra/layout.py, slices of reference cats), so each rank's contraction against
its rows of the next weight is a share of the single device's; the block taken with the other
rank's rows is a violation. Labelled on a real gloo group."""
import functools

import numpy as np
import pytest
import torch
import torch.distributed as dist

from gloo import run_fn_on_gloo
from shardproof import Case
from shardproof.api import verify_case

B, S, H, K = 2, 3, 4, 5


def single(x, v):
    t = torch.cat([torch.sin(x), torch.cos(x)], dim=-1)  # [B, S, 2H], built from its two halves
    return {"out": t.reshape(B * S, 2 * H) @ v}


def distributed(rank, world, bug=False):
    def program(x, v):
        t = torch.cat([torch.sin(x), torch.cos(x)], dim=-1)  # every rank builds the whole
        block = t.split(2 * H // world, dim=-1)[rank]  # its block of the last dim
        r = (rank + 1) % world if bug else rank
        part = block.reshape(B * S, -1) @ v.chunk(world, 0)[r]  # BUG (bug=True): the other rank's rows of v
        dist.all_reduce(part)
        return {"out": part}
    return program


def case(world: int = 2, bug: bool = False) -> Case:
    g = torch.Generator().manual_seed(0)
    inputs = {"x": torch.randn(B, S, H, generator=g), "v": torch.randn(2 * H, K, generator=g)}
    return Case(single=single, distributed=lambda rank, w: distributed(rank, w, bug), inputs=inputs,
                world_size=world, name="cat_block" + ("_bug" if bug else ""), expect={"out": "Replicate()"})


@pytest.mark.parametrize("world", (2, 4))
def test_block_of_a_concatenated_tensor_verifies(world):
    report = verify_case(case(world))
    assert report.status == "verified", report.reason
    bad = verify_case(case(world, bug=True))
    assert bad.status == "violation", bad.reason
    f = bad.findings[0]
    assert (f.kind, f.op) == ("wrong-shard-offset", "aten.mm"), f  # the matmul with the wrong rows
    assert "BUG" in open(__file__).read().splitlines()[int(f.source.split(" in ")[0].rsplit(":", 1)[1]) - 1], f.source


def _ranks(rank, world):
    c, bug_c = case(world), case(world, bug=True)
    with torch.no_grad():
        return [program(rank, world)(**{k: v.clone() for k, v in cs.inputs.items()})["out"].numpy()
                for program, cs in ((distributed, c), (functools.partial(distributed, bug=True), bug_c))]


@pytest.mark.slow
def test_pair_is_labelled_on_gloo():
    """On gloo the correct program computes the single device's output, the buggy one does not."""
    c = case(2)
    with torch.no_grad():
        want = single(**c.inputs)["out"].numpy()
    for good, bad in run_fn_on_gloo(_ranks, 2):
        assert np.allclose(good, want, atol=1e-5)
        assert not np.allclose(bad, want, atol=1e-2)
