"""relations/by_value.may_be_pieces (issue 16's prefilter of value matching) may skip a
single-device tensor only where matching could relate nothing to it. Drawn here: dtypes,
shapes, and ranks' pieces cut by torch's own ops (chunk along any dim, strided halves,
narrow at another offset, the whole replicated, transposed and made contiguous, with a foreign
value planted, or with repeated values so a first element recurs); whatever candidate_relations
finds, the prefilter must have let through."""
import numpy as np
import torch
from hypothesis import given, settings, strategies as st

from shardproof.relations.by_value import candidate_relations, may_be_pieces

from .core import examples

DTYPES = [torch.float32, torch.float64, torch.int64, torch.float16]


def _pieces(whole: torch.Tensor, kind: str, dim: int, world: int):
    if kind == "chunk":
        return list(torch.chunk(whole, world, dim))
    if kind == "strided":
        return [whole.index_select(dim, torch.arange(whole.shape[dim])[r::world]) for r in range(world)]
    if kind == "replicate":
        return [whole.clone() for _ in range(world)]
    if kind == "transposed":
        return [whole.transpose(0, -1).contiguous() for _ in range(world)]
    if kind == "shifted":
        return [torch.roll(c, 1, dim) for c in torch.chunk(whole, world, dim)]
    return [c + 1000 for c in torch.chunk(whole, world, dim)]  # foreign


@settings(max_examples=examples(40), deadline=None)
@given(dtype=st.sampled_from(DTYPES), shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
       kind=st.sampled_from(["chunk", "strided", "replicate", "transposed", "shifted", "foreign"]),
       world=st.integers(2, 4), repeats=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_the_prefilter_never_hides_a_relation(dtype, shape, kind, world, repeats, seed):
    g = torch.Generator().manual_seed(seed)
    n = int(np.prod(shape))
    flat = torch.randint(0, 3 if repeats else 10 * n + 10, (n,), generator=g) if repeats else torch.randperm(n, generator=g)
    whole = flat.reshape(shape).to(dtype)
    dim = int(seed % len(shape))
    locals_ = [p.numpy() for p in _pieces(whole, kind, dim, world) if p.numel()]
    if not locals_:
        return
    rels, _ = candidate_relations(whole.numpy(), locals_)
    if rels:
        assert may_be_pieces(whole.numpy(), locals_), (kind, rels)
    if kind == "foreign":
        assert not may_be_pieces(whole.numpy(), locals_) and not rels
