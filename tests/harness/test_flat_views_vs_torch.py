"""Soundness of relating a flattened multi-axis shard viewed back (issue 18: the activation a
pipeline stage sends as one flat buffer, a sequence and/or batch shard of a residual sum, viewed
back on the receiving stage), with torch as the judge: a reshape of a sum of tensors is built as
the sum of their reshapes (a rewrite), and viewing it back must find the sum itself
(``TermStore.reshaped_from``, layout ``_reshape_built``) with the rank's block of it, on every
rank, for drawn shapes, split dims, grids and world sizes. Every term a rule builds must hold
torch's value (the harness's claims), so a layout that picks the wrong elements is refused."""
import numpy as np
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from shardproof.algebra.layout import Val, reshape
from shardproof.algebra.terms import TermStore
from shardproof.relations.spec import Mesh, Shard

from .core import T, examples
from .test_chains_vs_torch import run_chain

SETTINGS = settings(max_examples=examples(30), deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.reuse, Phase.generate])
A = "aten."


def _round_trip(op: str) -> list:
    """s0 = op(x, y); s1: s0 flattened (the P2P buffer); s2: s1 viewed back as s0's local shape."""
    return [(A + op, lambda sh: ((T("x"), T("y")), {})),
            (A + "reshape", lambda sh: ((T("s0"), [int(np.prod(sh["s0"]))]), {})),
            (A + "reshape", lambda sh: ((T("s1"), list(sh["s0"])), {}))]


@settings(SETTINGS)
@given(st.data())
def test_flattened_shard_viewed_back_is_the_sum_torch_agrees(data):
    draw = data.draw
    grid = draw(st.sampled_from([(1, 2), (1, 3), (1, 4), (2, 2), (2, 1)]))  # (batch ranks, sequence ranks)
    world = grid[0] * grid[1]
    b, s = grid[0] * draw(st.integers(1, 2)), grid[1] * draw(st.integers(1, 3))
    h = draw(st.integers(1, 4))
    g = torch.Generator().manual_seed(draw(st.integers(0, 99)))
    x, y = (torch.randn(b, s, h, generator=g, dtype=torch.float64) for _ in range(2))
    layout = Shard(1) if grid[0] == 1 else Shard(0) if grid[1] == 1 else Mesh(grid, (Shard(0), Shard(1)))
    op = draw(st.sampled_from(["add", "sub"]))
    assert run_chain({"x": x, "y": y}, _round_trip(op), {"x": layout, "y": layout}, world) == "checked"


def test_a_flat_block_viewed_as_other_rows_is_not_the_block():
    """Adversarial: the rank's flat block of a (2, 4, 3) sum (batch row 0, sequence rows 0-1)
    viewed as (2, 1, 3) is two consecutive sequence rows, not sequence row 0 of both batch
    rows: the layout must say which elements it holds, and those are torch's."""
    terms = TermStore()
    x, y = (terms.make("input", (n, "f64"), (), (2, 4, 3)) for n in ("x", "y"))
    total = terms.make("lin", (1, 1), (x, y), (2, 4, 3))
    flat = Val(total, (np.array([0]), np.array([0, 1]), None))
    flat = reshape(terms, flat, (6,))
    back = reshape(terms, flat, (1, 2, 3))
    assert back.t == total and back.vecs[0].tolist() == [0] and back.vecs[1].tolist() == [0, 1]
    other = reshape(terms, flat, (2, 1, 3))
    xs = np.arange(24.0).reshape(2, 4, 3)  # stands for the sum's values
    held = xs[0, 0:2].reshape(2, 1, 3)  # what the rank holds, viewed as (2, 1, 3)
    if other.t == total:  # claimed a selection of the sum itself: it must be the elements held
        sel = xs[np.ix_(*[np.arange(n) if v is None else v for v, n in zip(other.vecs, terms.shape(total))])]
        assert np.array_equal(sel, held)
    else:  # a view of the flat block: not the (batch 0 and 1, sequence 0) rows
        assert terms[other.t].op != "lin" or terms.shape(other.t) != (2, 4, 3)
