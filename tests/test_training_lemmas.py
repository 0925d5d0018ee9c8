"""The lemmas training steps need, each on a small program: the identity verifies (and
agrees numerically), a near miss does not verify."""
import pytest

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402

from shardproof import Case  # noqa: E402
from shardproof.api import cross_check, prepare, verify_prepared  # noqa: E402


class Program(nn.Module):
    def __init__(self, fn, rank=0):
        super().__init__()
        self.fn, self.rank = fn, rank

    def forward(self, x, d):
        return self.fn(x, d, self.rank)


def _verdict(single, distributed, world=1, x=None):
    x = torch.randn(4, 3, 2) if x is None else x
    case = Case(single=Program(single), distributed=lambda r, w: Program(distributed, r),
                inputs={"x": x, "d": torch.rand(1) + 1}, world_size=max(world, 2),
                expect={"out": "Replicate()"})
    p = prepare(case)
    report = verify_prepared(p)
    if report.status == "verified":
        assert cross_check(p) == [], "proved equal but numerically different"
    return report.status


def _all_reduce(t):
    t = t.clone()
    dist.all_reduce(t)
    return t


def test_common_divisor_is_linear():
    whole = lambda x, d, r: x.sum() / d.sum()  # noqa: E731
    assert _verdict(whole, lambda x, d, r: x[:2].sum() / d.sum() + x[2:].sum() / d.sum()) == "verified"
    assert _verdict(whole, lambda x, d, r: x[:2].sum() / d.sum() + x[2:].sum() / (d.sum() + 1)) == "violation"


def test_sum_of_a_merged_view_is_the_sum_of_the_merged_dims():
    whole = lambda x, d, r: x.sum((0, 1))  # noqa: E731
    assert _verdict(whole, lambda x, d, r: x.reshape(12, 2).sum(0)) == "verified"
    assert _verdict(whole, lambda x, d, r: x.reshape(12, 2)[:6].sum(0) * 2) == "violation"


def test_replicated_term_counted_once_across_ranks():
    """Σ_r (share_r + [r == 0]·c) = whole + c: a term only one rank adds counts once."""
    whole = lambda x, d, r: x.sum() + d.sum()  # noqa: E731
    once = lambda x, d, r: _all_reduce(x[2 * r:2 * r + 2].sum() + (d.sum() if r == 0 else 0))  # noqa: E731
    every = lambda x, d, r: _all_reduce(x[2 * r:2 * r + 2].sum() + d.sum())  # noqa: E731
    assert _verdict(whole, once, world=2) == "verified"
    assert _verdict(whole, every, world=2) == "violation"


def test_disjoint_shares_sum_to_their_union():
    whole = lambda x, d, r: x[:3].sum()  # noqa: E731
    disjoint = lambda x, d, r: _all_reduce(x[r:r + 1].sum() if r == 0 else x[1:3].sum())  # noqa: E731
    overlapping = lambda x, d, r: _all_reduce(x[0:2].sum() if r == 0 else x[1:3].sum())  # noqa: E731
    assert _verdict(whole, disjoint, world=2) == "verified"
    assert _verdict(whole, overlapping, world=2) == "violation"


def test_exact_scales_float_out_of_products():
    whole = lambda x, d, r: x * d  # noqa: E731
    assert _verdict(whole, lambda x, d, r: ((x * 1024) * d) / 1024) == "verified"
    assert _verdict(whole, lambda x, d, r: (torch.full_like(x, 4.0) * x * d).reshape(24, 1).reshape(4, 3, 2) / 4) \
        == "verified"
    assert _verdict(whole, lambda x, d, r: ((x * 1024) * d) / 1000) == "violation"


def test_scaled_gradient_of_a_loss_unscaled():
    """d(c·L)/dx / c = dL/dx, through a backward op (gelu's)."""
    def grad(x, d, scale):
        x = x.detach().requires_grad_()
        loss = torch.nn.functional.gelu(x * d).sum() * scale
        return torch.autograd.grad(loss, x)[0] / scale
    with torch.enable_grad():
        assert _verdict(lambda x, d, r: grad(x, d, 1.0), lambda x, d, r: grad(x, d, 512.0)) == "verified"
        assert _verdict(lambda x, d, r: grad(x, d, 1.0), lambda x, d, r: grad(x, d, 512.0) * 2) == "violation"


def test_a_scaled_block_of_a_merged_dim_splits_as_the_whole_does():
    """A block of heads of one micro-batch of a scaled (batch*heads) tensor, viewed back to
    (batch, heads), is the whole's (batch, heads) view selected, not a coarser (2*batch,
    heads/2) split: the attention backward's q k^T gradient under tensor parallelism."""
    scale = 0.7071067811865475  # an inexact float: kept as an exact scale factor of the term

    def heads(t, c=scale):  # per (batch, head) row: a batched product, scaled, viewed back
        rows = t.reshape(-1, 1, 2)
        return (torch.bmm(rows, rows.transpose(1, 2)) * c).reshape(t.shape[0], -1)

    def blocks(x, c=scale):  # micro-batches x head blocks, the last block scaled by `c`
        return torch.cat([torch.cat([heads(x[b:b + 2, :3]), heads(x[b:b + 2, 3:], c if b else scale)], 1)
                          for b in (0, 2)], 0)

    whole = lambda x, d, r: heads(x)  # noqa: E731
    x = torch.randn(4, 6, 2)
    assert _verdict(whole, lambda x, d, r: blocks(x), x=x) == "verified"
    assert _verdict(whole, lambda x, d, r: blocks(x, 0.5), x=x) == "violation"


def test_broadcast_batch_of_a_contraction_is_a_free_dim():
    """``A[None] @ B`` (A broadcast over B's batch, experts on shared tokens) computed for two
    blocks of B and concatenated is the whole product; the other token matrix is not."""
    whole = lambda x, d, r: x[1].t().unsqueeze(0) @ x  # noqa: E731
    blocks = lambda x, d, r: torch.cat([x[1].t().unsqueeze(0) @ x[:2], x[1].t().unsqueeze(0) @ x[2:]])  # noqa: E731
    wrong = lambda x, d, r: torch.cat([x[1].t().unsqueeze(0) @ x[:2], x[0].t().unsqueeze(0) @ x[2:]])  # noqa: E731
    assert _verdict(whole, blocks) == "verified"
    assert _verdict(whole, wrong) == "violation"



def _layer_norm_grad(x, d, scale, wrt):
    """d(c·L)/dx or d(c·L)/dw through LayerNorm's backward, with L a cubic error. (Over a width
    of 2, or with a squared error, L is constant in x: the x-gradient is 0 up to rounding, which
    the confirmation cannot tell from a wrong value.)"""
    x = x.detach().requires_grad_()
    w = (d * torch.ones(3, 2)).detach().requires_grad_()
    loss = (0.5 * torch.nn.functional.layer_norm(x, (3, 2), w) ** 3).sum() * scale
    return torch.autograd.grad(loss, x if wrt == "x" else w)[0]


@pytest.mark.parametrize("wrt", ["x", "w"])
def test_scaled_gradient_unscaled_through_layer_norm_backward(wrt):
    """LayerNorm's backward is linear in the incoming gradient (LINEAR_IN): d(c·L)/c = dL
    for its input and its weight."""
    whole = lambda x, d, r: _layer_norm_grad(x, d, 1.0, wrt)  # noqa: E731
    with torch.enable_grad():
        assert _verdict(whole, lambda x, d, r: _layer_norm_grad(x, d, 3.0, wrt) / 3) == "verified"
        assert _verdict(whole, lambda x, d, r: _layer_norm_grad(x, d, 3.0, wrt) / 2.9) == "violation"


class LossAndGradient(nn.Module):
    """A squared error normalised by the count `n` over `share` (a rank's loss normalised by
    its own share of the count), reported times `share`, and its gradient, times `share`
    or (`divide` False) not."""

    def __init__(self, share=1, divide=True):
        super().__init__()
        self.share, self.divide = share, divide

    def forward(self, x, d, n):
        d = d.detach().requires_grad_()
        loss = (0.5 * (x * d) ** 2).sum() / ((n * n + 1).sum() / self.share)
        grad = torch.autograd.grad(loss, d)[0]
        return {"loss": loss / self.share, "grad": grad / self.share if self.divide else grad}


def test_an_undivided_multiple_is_located_where_it_is_returned():
    """A gradient twice the single-device one is halved on its way by the squared error's
    backward exactly as the single-device one is (2 · 0.5 = 1: equal to another tensor by
    coincidence); the multiple's trail stays unbroken past it, and the violation is a
    scaling mismatch at the gradient returned undivided (the loss, divided back, is right)."""
    def verify(divide):
        case = Case(single=LossAndGradient(), distributed=lambda r, w: LossAndGradient(2, divide),
                    inputs={"x": torch.randn(4, 3, 2), "d": torch.rand(1) + 1, "n": torch.rand(3) + 1},
                    world_size=2, expect={"loss": "Replicate()", "grad": "Replicate()"})
        p = prepare(case)
        return p, verify_prepared(p)
    with torch.enable_grad():
        assert verify(True)[1].status == "verified"
        p, report = verify(False)
    assert report.status == "violation"
    finding = report.findings[0]
    assert (finding.kind, finding.rank) == ("scaling-mismatch", [0, 1]), finding
    assert "2 times" in finding.actual, finding
    assert finding.node == p.dist.graphs[0].outputs["grad"].name, finding
