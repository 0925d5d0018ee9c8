"""Normal forms that make the same math written another way build the same term.

- Views distribute over sums: ``reshape(a + b) = reshape(a) + reshape(b)`` (and permute),
  where a part broadcast over leading dims (a bias ``[n]`` in a ``[b*s, n]`` sum) stays as
  it is when the reshape keeps the trailing dims it spans. So a bias added before the view
  of a product (``addmm(bias, ...).view(b, s, n)``) or after it (``mm(...).view(b, s, n) +
  bias``) is one linear form, whatever the association of the sum.

Each rewrite is an identity over exact arithmetic (checked in tests/test_same_math.py
against torch's kernels)."""
from __future__ import annotations

from .layout import view_term
from .lemmas import linear
from .terms import TermStore, rewrite


def _spread_part(terms: TermStore, op: str, attrs: tuple, part: int, whole: tuple, shape: tuple):
    """The view of one part of a linear form of shape `whole`, as a part of the viewed
    form of `shape` (right-aligned broadcasting), or None when it has no such form."""
    ps = terms.shape(part)
    if ps == whole:
        return view_term(terms, op, attrs, part, shape)
    if op != "reshape":
        return None
    core = ps[next((i for i, s in enumerate(ps) if s != 1), len(ps)):]  # leading 1s broadcast anyway
    k = len(core)
    if len(ps) > len(shape) or (k and (len(whole) < k or tuple(whole[-k:]) != tuple(shape[-k:]))):
        return None
    return part  # it spans only trailing dims the reshape keeps: broadcast the same way after it


def _view_of_sum(op: str):
    def rule(terms: TermStore, attrs, children, shape):
        inner = terms[children[0]]
        if inner.op != "lin" or len(inner.children) < 2:
            return None
        parts = {}
        for part, c in zip(inner.children, inner.attrs):
            viewed = _spread_part(terms, op, attrs, part, inner.shape, tuple(shape))
            if viewed is None:
                return None
            parts[viewed] = parts.get(viewed, 0) + c
        return linear(terms, parts, shape)
    return rule


rewrite("reshape")(_view_of_sum("reshape"))
rewrite("permute")(_view_of_sum("permute"))


@rewrite("reshape")
def _unfolded_product(terms: TermStore, attrs, children, shape):
    """``view(mm(view(A, [prod(lead), K]), W), lead + rest) = dot(A, W)`` contracting A's last
    dim: torch's matmul folds a contiguous ``[*lead, K]`` lhs into rows, but multiplies a
    non-contiguous one (a sequence shard) as a batched product with W broadcast, which is the
    contraction of A's last dim (:func:`shardproof.algebra.compute.dot`). Row-major flattening
    and the same unflattening make them one product, element by element: exact."""
    inner = terms[children[0]]
    if inner.op != "dot":
        return None
    spec, over = inner.attrs
    if len(spec) != 4 or spec[0] or spec[1] or spec[2] != (1,) or over is not None:
        return None
    lhs, rhs = inner.children
    flat = terms[lhs]
    if flat.op != "reshape" or len(flat.shape) != 2:
        return None
    a = flat.children[0]
    ashape = terms.shape(a)
    if len(ashape) < 2 or ashape[-1] != flat.shape[1]:
        return None
    rest = tuple(inner.shape[1:])
    if tuple(shape) != tuple(ashape[:-1]) + rest:
        return None
    return terms.make("dot", (((), (), (len(ashape) - 1,), tuple(spec[3])), None), (a, rhs), tuple(shape))
