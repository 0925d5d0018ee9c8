"""Backward ops of joint fw+bw graphs: reference numerics against torch, and relation rules
on small sharded programs (each proves the correct program and rejects a wrong twin)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="live capture needs the torch extra")
from torch import nn  # noqa: E402

from shardproof import Case, verify  # noqa: E402
from shardproof.ops.registry import lookup  # noqa: E402

A = torch.ops.aten


def num(name, *args, **kwargs):
    return lookup(name).numerics(*args, **kwargs)


def close(mine, ref):
    mine, ref = np.asarray(mine, dtype=np.float64), ref.detach().double().numpy()
    assert mine.shape == ref.shape
    np.testing.assert_allclose(mine, ref, atol=1e-9, rtol=1e-9)


# ---------------------------------------------------------------- numerics against torch

def test_elementwise_backward_numerics():
    g, x = torch.randn(3, 4, 5, dtype=torch.float64), torch.randn(3, 4, 5, dtype=torch.float64)
    for approximate in ("none", "tanh"):
        close(num("aten.gelu_backward", g.numpy(), x.numpy(), approximate=approximate),
              A.gelu_backward(g, x, approximate=approximate))
    close(num("aten.threshold_backward", g.numpy(), x.numpy(), 0.0), A.threshold_backward(g, x, 0.0))
    close(num("aten.sigmoid_backward", g.numpy(), torch.sigmoid(x).numpy()), A.sigmoid_backward(g, torch.sigmoid(x)))
    close(num("aten.tanh_backward", g.numpy(), torch.tanh(x).numpy()), A.tanh_backward(g, torch.tanh(x)))
    close(num("aten.silu_backward", g.numpy(), x.numpy()), A.silu_backward(g, x))


@pytest.mark.parametrize("dim", [-1, 1])
def test_softmax_backward_numerics(dim):
    g, x = torch.randn(3, 4, 5, dtype=torch.float64), torch.randn(3, 4, 5, dtype=torch.float64)
    y = torch.softmax(x, dim)
    close(num("aten._softmax_backward_data", g.numpy(), y.numpy(), dim, torch.float64),
          A._softmax_backward_data(g, y, dim, torch.float64))
    y = torch.log_softmax(x, dim)
    close(num("aten._log_softmax_backward_data", g.numpy(), y.numpy(), dim, torch.float64),
          A._log_softmax_backward_data(g, y, dim, torch.float64))


@pytest.mark.parametrize("shape", [[5], [4, 5]])
def test_layer_norm_backward_numerics(shape):
    g, x = torch.randn(3, 4, 5, dtype=torch.float64), torch.randn(3, 4, 5, dtype=torch.float64)
    w, b = torch.randn(shape, dtype=torch.float64), torch.randn(shape, dtype=torch.float64)
    _, mean, rstd = A.native_layer_norm(x, shape, w, b, 1e-5)
    ref = A.native_layer_norm_backward(g, x, shape, mean, rstd, w, b, [True, True, True])
    mine = num("aten.native_layer_norm_backward", g.numpy(), x.numpy(), shape, mean.numpy(), rstd.numpy(),
               w.numpy(), b.numpy(), [True, True, True])
    for m, r in zip(mine, ref):
        close(m, r)


def test_apex_layer_norm_backward_numerics_match_autograd():
    g, x = torch.randn(3, 4, 5, dtype=torch.float64), torch.randn(3, 4, 5, dtype=torch.float64)
    w, b = torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
    torch.nn.functional.layer_norm(xr, [5], wr, br, 1e-5).backward(g)
    _, mean, invvar = num("apex.fused_layer_norm_affine_fwd", x.numpy(), w.numpy(), b.numpy(), [5], 1e-5)
    assert mean.shape == (12,) and invvar.shape == (12,)  # apex: statistics flattened over the rows
    mine = num("apex.fused_layer_norm_affine_bwd", g.numpy(), mean, invvar, x.numpy(), [5], w.numpy(), b.numpy(), 1e-5)
    for m, r in zip(mine, (xr.grad, wr.grad, br.grad)):
        close(m, r)


@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_nll_loss_backward_numerics(reduction):
    logp = torch.log_softmax(torch.randn(6, 7, dtype=torch.float64), -1)
    t = torch.randint(0, 7, (6,))
    go = torch.randn(6, dtype=torch.float64) if reduction == 0 else torch.tensor(1.7, dtype=torch.float64)
    _, total = A.nll_loss_forward(logp, t, None, reduction, -100)
    close(num("aten.nll_loss_backward", go.numpy(), logp.numpy(), t.numpy(), None, reduction, -100, total.numpy()),
          A.nll_loss_backward(go, logp, t, None, reduction, -100, total))


def test_embedding_backward_and_row_scatter_numerics():
    ids, g = torch.randint(0, 10, (3, 4)), torch.randn(3, 4, 6, dtype=torch.float64)
    for padding_idx in (-1, 3):
        close(num("aten.embedding_dense_backward", g.numpy(), ids.numpy(), 10, padding_idx, False),
              A.embedding_dense_backward(g, ids, 10, padding_idx, False))
    x, v, t = torch.randn(6, 7, dtype=torch.float64), torch.randn(6, dtype=torch.float64), torch.randint(0, 7, (6,))
    close(num("aten.index_put", x.numpy(), [np.arange(6), t.numpy()], v.numpy()), A.index_put(x, [torch.arange(6), t], v))


# ---------------------------------------------------------------- rules on sharded programs

import torch.distributed as dist  # noqa: E402

SEQ, HID = 8, 6


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, **kw):
        return self.fn(**kw)


def _rows(rank, world, inputs, names=("g", "x")):
    out = dict(inputs)
    for n in names:
        out[n] = inputs[n].chunk(world, 0)[rank]
    return out


def _ln_grads(g, x, w, b):
    _, mean, rstd = A.native_layer_norm(x, [HID], w, b, 1e-5)
    return A.native_layer_norm_backward(g, x, [HID], mean, rstd, w, b, [True, True, True])


def _apex_ln_grads(g, x, w, b):
    """apex's statistics are flat over the rows: computed here as native ones, flattened."""
    _, mean, rstd = A.native_layer_norm(x, [HID], w, b, 1e-5)
    return _ln_grads_flat(g, x, w, b, mean.reshape(-1), rstd.reshape(-1))


def _ln_grads_flat(g, x, w, b, mean, rstd):
    shape = x.shape[:-1] + (1,)
    return A.native_layer_norm_backward(g, x, [HID], mean.reshape(shape), rstd.reshape(shape), w, b,
                                        [True, True, True])


def _sp_ln_case(reduce_weight_grad: bool, world=2):
    def single(g, x, w, b):
        return _ln_grads(g, x, w, b)

    def local(g, x, w, b):
        gi, gw, gb = _ln_grads(g, x, w, b)
        if reduce_weight_grad:
            dist.all_reduce(gw)
        dist.all_reduce(gb)
        return gi, gw, gb
    inputs = {"g": torch.randn(SEQ, 2, HID), "x": torch.randn(SEQ, 2, HID), "w": torch.randn(HID), "b": torch.randn(HID)}
    return Case(single=Fn(single), distributed=lambda r, w: Fn(local), inputs=inputs, world_size=world,
                dist_inputs=_rows, expect={"out0": "Shard(0)", "out1": "Replicate()", "out2": "Replicate()"})


@pytest.mark.parametrize("world", [2, 4])
def test_sequence_parallel_layer_norm_grads_are_partial_sums_completed_by_all_reduce(world):
    report = verify(_sp_ln_case(True, world))
    assert report.status == "verified", report.reason
    assert [o.holds for o in report.outputs] == ["Shard(0)", "Replicate()", "Replicate()"]


def test_sequence_parallel_layer_norm_weight_grad_never_reduced_is_a_violation():
    report = verify(_sp_ln_case(False))
    assert report.status == "violation"
    f = report.findings[0]  # the weight gradient, a partial sum on each rank
    assert (f.node, f.op, f.rank, f.kind) == ("native_layer_norm_backward", "aten.native_layer_norm_backward", [0, 1],
                                              "partial-sum-never-reduced")  # its weight gradient, getitem_4
    assert "out1" in f.message


def _gelu_softmax_backward_case(dist_inputs, expect: str):
    def single(g, x):
        y = torch.softmax(x, -1)
        return A._softmax_backward_data(A.gelu_backward(g, x), y, -1, torch.float32)
    return Case(single=Fn(single), distributed=lambda r, w: Fn(single), dist_inputs=dist_inputs,
                inputs={"g": torch.randn(SEQ, HID), "x": torch.randn(SEQ, HID)}, expect={"out": expect})


def test_gelu_and_softmax_backward_follow_shards():
    assert verify(_gelu_softmax_backward_case(_rows, "Shard(0)")).status == "verified"
    # the softmax normalizes over the sharded dim: a rank's columns are not the whole softmax
    report = verify(_gelu_softmax_backward_case(lambda r, w, i: {k: v.chunk(w, 1)[r] for k, v in i.items()},
                                                 "Shard(1)"))
    assert report.status == "violation"
    f = report.findings[0]
    assert (f.node, f.op, f.rank, f.kind) == ("_softmax", "aten._softmax", [0, 1], "wrong-dim")


VOCAB = 12


def _embedding_grad_case(mode: str, world=2):
    """Word-embedding weight gradient: tokens split over ranks (partial sums, all-reduced), or
    Megatron's vocab-parallel backward (rank r owns table rows [lo, hi): masked local ids,
    masked gradient rows)."""
    def single(g, ids):
        return A.embedding_dense_backward(g, ids, VOCAB, -1, False)

    def tokens(g, ids):
        out = A.embedding_dense_backward(g, ids, VOCAB, -1, False)
        dist.all_reduce(out)
        return out

    def vocab(g, ids):
        rank, n = dist.get_rank(), dist.get_world_size()
        rows = VOCAB // n
        lo, hi = rank * rows, (rank + 1) * rows
        mask = (ids < lo) | (ids >= hi)
        local = ids - lo
        local[mask] = 0
        if mode != "vocab-unmasked-grad":
            g = g.clone()
            g[mask] = 0.0
        return A.embedding_dense_backward(g, local, rows, -1, False)
    inputs = {"g": torch.randn(3, 4, HID), "ids": torch.randint(0, VOCAB, (3, 4))}
    if mode == "tokens":
        return Case(single=Fn(single), distributed=lambda r, w: Fn(tokens), inputs=inputs, world_size=world,
                    dist_inputs=lambda r, w, i: {k: v.chunk(w, 1)[r] for k, v in i.items()},
                    expect={"out": "Replicate()"})
    return Case(single=Fn(single), distributed=lambda r, w: Fn(vocab), inputs=inputs, world_size=world,
                expect={"out": "Shard(0)"})


@pytest.mark.parametrize("mode,world", [("tokens", 2), ("vocab", 2), ("vocab", 3)])
def test_embedding_weight_gradient_rules(mode, world):
    report = verify(_embedding_grad_case(mode, world))
    assert report.status == "verified", report.reason


def test_vocab_parallel_embedding_grad_without_masking_the_gradient_is_a_violation():
    assert verify(_embedding_grad_case("vocab-unmasked-grad")).status == "violation"


def test_vocab_parallel_embedding_grad_without_masking_is_blamed_on_the_scatter():
    f = verify(_embedding_grad_case("vocab-unmasked-grad")).findings[0]
    # the gradient rows of tokens a rank does not own are summed into its local row 0: the
    # masks and masked ids before it are rank-local values, the scatter is where it breaks
    assert (f.node, f.op, f.rank, f.kind) == ("embedding_dense_backward", "aten.embedding_dense_backward", [0, 1],
                                              "value-mismatch")


def _cross_entropy_grad_case(wrong: bool = False, world=2):
    """Megatron's vocab-parallel cross-entropy backward: softmax over the rank's vocabulary
    columns, minus one at the target where the rank owns it (a scatter through masked ids)."""
    def grad(logits, target, lo, hi, reduce, wrong=False):
        m = logits.max(-1, keepdim=True).values
        reduce(m, op=dist.ReduceOp.MAX)
        e = torch.exp(logits - m)
        s = e.sum(-1, keepdim=True)
        reduce(s)
        p = e / s
        mask = (target < lo) | (target >= hi)
        idx = target - lo
        idx[mask] = 0
        rows = torch.arange(p.shape[0])
        keep = (1.0 - mask.float()) if not wrong else 1.0
        p[rows, idx] = p[rows, idx] - keep
        return p

    def single(logits, target):  # the same code over the whole vocabulary (Megatron at TP 1)
        return grad(logits, target, 0, VOCAB, lambda t, op=None: None)

    def local(logits, target):
        rank, n = dist.get_rank(), dist.get_world_size()
        part = VOCAB // n
        return grad(logits, target, rank * part, (rank + 1) * part, dist.all_reduce, wrong)
    inputs = {"logits": torch.randn(5, VOCAB), "target": torch.randint(0, VOCAB, (5,))}
    return Case(single=Fn(single), distributed=lambda r, w: Fn(local), inputs=inputs, world_size=world,
                dist_inputs=lambda r, w, i: {"logits": i["logits"].chunk(w, 1)[r], "target": i["target"]},
                expect={"out": "Shard(1)"})


@pytest.mark.parametrize("world", [2, 3])
def test_vocab_parallel_cross_entropy_gradient_scatter(world):
    report = verify(_cross_entropy_grad_case(world=world))
    assert report.status == "verified", report.reason


def test_vocab_parallel_cross_entropy_gradient_without_the_mask_is_a_violation():
    assert verify(_cross_entropy_grad_case(wrong=True)).status == "violation"


def test_vocab_parallel_cross_entropy_gradient_without_the_mask_is_blamed_on_the_subtraction():
    f = verify(_cross_entropy_grad_case(wrong=True)).findings[0]
    # p[rows, idx] - 1 subtracts one at targets the rank does not own (its masked index 0)
    assert (f.node, f.op, f.rank, f.kind) == ("sub_2", "aten.sub", [0, 1], "value-mismatch")


def test_nll_loss_backward_on_row_shards():
    def single(logp, target, go):
        _, total = A.nll_loss_forward(logp, target, None, 0, -100)
        return A.nll_loss_backward(go, logp, target, None, 0, -100, total)
    inputs = {"logp": torch.randn(6, 5), "target": torch.randint(0, 5, (6,)), "go": torch.randn(6)}
    case = Case(single=Fn(single), distributed=lambda r, w: Fn(single), inputs=inputs,
                dist_inputs=lambda r, w, i: {k: v.chunk(w, 0)[r] for k, v in i.items()}, expect={"out": "Shard(0)"})
    assert verify(case).status == "verified"


# ---------------------------------------------------------------- masked ids: which branch is masked
#
# Megatron's masked local ids are ``where(m, c, ids - lo)``; the swapped ``where(m, ids - lo, c)``
# looks up the fill row for every in-range token and must never verify. Dumps (not live
# capture: eager PyTorch would fail on the out-of-range indices the swapped form makes).

from shardproof.engine.verify import verify_graphs  # noqa: E402
from shardproof.frontends.fx_text import parse_graph  # noqa: E402
from shardproof.ir.graph import DistributedProgram  # noqa: E402
from shardproof.relations.infer import parse_spec, resolve_inputs  # noqa: E402


def _dump(body: str, signature: str) -> str:
    lines = "".join(f"        {line}\n" for line in body.strip().splitlines())
    return f"class GraphModule(torch.nn.Module):\n    def forward(self, {signature}):\n{lines}"


def _verify_dumps(seq_text, rank_texts, spec):
    seq = parse_graph(seq_text, "seq.py", world_size=1)
    dist = DistributedProgram([parse_graph(t, f"r{r}.py", world_size=len(rank_texts)) for r, t in enumerate(rank_texts)])
    bindings = resolve_inputs({n.name: n.shape for n in seq.inputs},
                              [{n.name: n.shape for n in g.inputs} for g in dist.graphs], parse_spec(spec), by_shape=True)
    return verify_graphs(seq, dist, bindings)


def _masked(lo, hi, swapped):
    branches = "sub, zeros" if swapped else "zeros, sub"
    return f'''
lt: "b8[4]" = torch.ops.aten.lt.Scalar(ids, {lo})
ge: "b8[4]" = torch.ops.aten.ge.Scalar(ids, {hi})
bitwise_or: "b8[4]" = torch.ops.aten.bitwise_or.Tensor(lt, ge)
sub: "i64[4]" = torch.ops.aten.sub.Tensor(ids, {lo})
zeros: "i64[]" = torch.ops.aten.zeros.default([], dtype = torch.int64)
where: "i64[4]" = torch.ops.aten.where.self(bitwise_or, {branches})
unsqueeze: "b8[4, 1]" = torch.ops.aten.unsqueeze.default(bitwise_or, -1)
zeros_1: "f32[]" = torch.ops.aten.zeros.default([], dtype = torch.float32)'''


def _lookup_rank(lo, hi, swapped):
    return _dump(_masked(lo, hi, swapped) + '''
embedding: "f32[4, 3]" = torch.ops.aten.embedding.default(w, where)
where_1: "f32[4, 3]" = torch.ops.aten.where.self(unsqueeze, zeros_1, embedding)
all_reduce: "f32[4, 3]" = torch.ops._c10d_functional.all_reduce.default(where_1, "sum", "0")
wait_tensor: "f32[4, 3]" = torch.ops._c10d_functional.wait_tensor.default(all_reduce)
return (wait_tensor,)''', 'ids: "i64[4]", w: "f32[4, 3]"')


def _grad_rank(lo, hi, swapped):
    return _dump(_masked(lo, hi, swapped) + '''
where_1: "f32[4, 3]" = torch.ops.aten.where.self(unsqueeze, zeros_1, g)
embedding_dense_backward: "f32[4, 3]" = torch.ops.aten.embedding_dense_backward.default(where_1, where, 4, -1, False)
return (embedding_dense_backward,)''', 'ids: "i64[4]", g: "f32[4, 3]"')


@pytest.mark.parametrize("swapped", [False, True])
def test_masked_lookup_and_its_gradient_only_with_the_fill_in_the_masked_branch(swapped):
    seq = _dump('embedding: "f32[4, 3]" = torch.ops.aten.embedding.default(w, ids)\nreturn (embedding,)',
                'ids: "i64[4]", w: "f32[8, 3]"')
    report = _verify_dumps(seq, [_lookup_rank(0, 4, swapped), _lookup_rank(4, 8, swapped)], {"w": "Shard(0)"})
    assert (report.status == "verified") is not swapped, report.reason
    seq = _dump('embedding_dense_backward: "f32[8, 3]" = torch.ops.aten.embedding_dense_backward.default('
                'g, ids, 8, -1, False)\nreturn (embedding_dense_backward,)', 'ids: "i64[4]", g: "f32[4, 3]"')
    report = _verify_dumps(seq, [_grad_rank(0, 4, swapped), _grad_rank(4, 8, swapped)], {})
    assert (report.status == "verified") is not swapped, report.reason
    if not swapped:
        assert report.outputs[0].holds == "Shard(0)"


def test_slice_backward_of_a_row_shard_stays_that_rows_shard():
    """slice's backward writes the gradient between zero blocks; with the gradient sharded
    along another dim each rank holds its rows of the result (RoPE's rotate_half backward on
    a microbatch of a data-parallel rank)."""
    def step(rows):
        return lambda g: A.slice_backward(g, [rows, 4], 1, 1, 3, 1)
    case = Case(single=Fn(step(6)), distributed=lambda r, w: Fn(step(6 // w)), inputs={"g": torch.randn(6, 2)},
                dist_inputs=lambda r, w, i: {"g": i["g"].chunk(w, 0)[r]}, expect={"out": "Shard(0)"})
    report = verify(case)
    assert report.status == "verified", report.reason
    wrong = Case(single=Fn(step(6)), distributed=lambda r, w: Fn(lambda g: A.slice_backward(g, [6 // w, 4], 1, 0, 2, 1)),
                 inputs={"g": torch.randn(6, 2)}, dist_inputs=lambda r, w, i: {"g": i["g"].chunk(w, 0)[r]},
                 expect={"out": "Shard(0)"})
    assert verify(wrong).status == "violation"


# ---------------------------------------------------------------- GQA backward of a fused QKV projection

def _fused_gqa_grads(qkv, g, heads, kv_heads, d):
    """The gradient of a fused [q | k | v] projection's output through GQA attention
    (k/v heads expanded to the query heads, as repeat_kv does)."""
    b, s = qkv.shape[:2]
    qkv = qkv.detach().requires_grad_(True)
    q, k, v = qkv.split([heads * d, kv_heads * d, kv_heads * d], dim=-1)
    q, k, v = (t.reshape(b, s, -1, d).transpose(1, 2) for t in (q, k, v))
    rep = heads // kv_heads
    k, v = (t[:, :, None].expand(b, kv_heads, rep, s, d).reshape(b, heads, s, d) for t in (k, v))
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return torch.autograd.grad(o, qkv, g.transpose(1, 2).reshape(o.transpose(1, 2).shape).transpose(1, 2))[0]


def _gqa_grad_case(kv_shift=0, world=2, heads=4, kv_heads=2, d=2):
    """Each rank re-fuses its q heads and whole KV heads; `kv_shift` makes a rank take its
    neighbour's k/v sections (a wrong twin)."""
    def single(qkv, g):
        return _fused_gqa_grads(qkv, g, heads, kv_heads, d)

    def local(qkv, g):
        r, n = dist.get_rank(), dist.get_world_size()
        q, k, v = qkv.split([heads * d, kv_heads * d, kv_heads * d], dim=-1)
        kr = (r + kv_shift) % n
        mine = torch.cat([q.chunk(n, -1)[r], k.chunk(n, -1)[kr], v.chunk(n, -1)[kr]], -1)
        return _fused_gqa_grads(mine, g.chunk(n, 1)[r], heads // n, kv_heads // n, d)
    inputs = {"qkv": torch.randn(2, 3, (heads + 2 * kv_heads) * d), "g": torch.randn(2, heads, 3, d)}
    sizes = [heads * d, kv_heads * d, kv_heads * d]
    return Case(single=Fn(single), distributed=lambda r, w: Fn(local), inputs=inputs, world_size=world,
                expect={"out": f"Interleaved(2, {sizes})"})


def test_gqa_fused_projection_gradient_is_the_ranks_sections():
    """Each copy of an expanded KV head has its own gradient (summed by repeat_kv's
    backward), and the re-fused [q | k | v] gradient relates section by section."""
    report = verify(_gqa_grad_case())
    assert report.status == "verified", report.reason


def test_gqa_fused_projection_gradient_from_the_wrong_kv_sections_is_a_violation():
    assert verify(_gqa_grad_case(kv_shift=1)).status == "violation"


# ---------------------------------------------------------------- cross-entropy written out (vocab-parallel)

def _vocab_softmax(x, wrong_sum=False):
    """Megatron's softmax over the vocabulary columns a rank holds: the row max and the
    denominator all-reduced over the ranks (`wrong_sum`: the local denominator only)."""
    m = x.max(-1, keepdim=True).values
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    e = torch.exp(x - m)
    s = e.sum(-1, keepdim=True)
    if not wrong_sum:
        dist.all_reduce(s)
    return e / s


def _vocab_columns(rank, world, inputs):
    return {**inputs, "x": inputs["x"].chunk(world, 1)[rank]}


def _softmax_case(wrong_sum=False):
    return Case(single=Fn(lambda x: torch.log_softmax(x, -1).exp()),
                distributed=lambda r, w: Fn(lambda x: _vocab_softmax(x, wrong_sum)),
                inputs={"x": torch.randn(5, 12)}, world_size=2, dist_inputs=_vocab_columns, expect={"out": "Shard(1)"})


def test_softmax_written_out_over_vocab_columns_is_exp_of_log_softmax():
    assert verify(_softmax_case()).status == "verified"


def test_softmax_over_the_local_columns_only_is_a_violation():
    assert verify(_softmax_case(wrong_sum=True)).status == "violation"


def _ce_grad_case(sign=-1.0):
    """F.cross_entropy's logit gradient (log_softmax backward of the pick's gradient) against
    Megatron's: softmax minus one at the target the rank owns, times the incoming gradient
    (`sign` +1: plus one, a wrong twin)."""
    def single(x, t, c):
        logp = A._log_softmax(x, 1, False)
        g = A.nll_loss_backward(c, logp, t, None, 0, -100, torch.tensor(1.0))
        return A._log_softmax_backward_data(g, logp, 1, torch.float32)

    def local(x, t, c):
        rank = dist.get_rank()
        lo, hi = rank * x.shape[1], (rank + 1) * x.shape[1]
        mask = (t < lo) | (t >= hi)
        idx = t - lo
        idx[mask] = 0
        grad = _vocab_softmax(x).clone()
        rows = torch.arange(x.shape[0])
        grad[rows, idx] += sign * (1.0 - mask.float())
        return grad * c.unsqueeze(-1)
    inputs = {"x": torch.randn(5, 12), "t": torch.randint(0, 12, (5,)), "c": torch.randn(5)}
    return Case(single=Fn(single), distributed=lambda r, w: Fn(local), inputs=inputs, world_size=2,
                dist_inputs=_vocab_columns, expect={"out": "Shard(1)"})


def test_cross_entropy_gradient_as_softmax_minus_onehot_over_vocab_columns():
    report = verify(_ce_grad_case())
    assert report.status == "verified", report.reason


def test_cross_entropy_gradient_with_plus_onehot_is_a_violation():
    assert verify(_ce_grad_case(sign=1.0)).status == "violation"


def _split_view_sum_case(rows=3):
    """A batch flattened to (batch*seq, h) summed over tokens, against each rank summing its
    batch rows of the (batch, seq, h) view (`rows` < seq: part of each sequence, a wrong twin)."""
    def local(x):
        piece = x.view(4, 3, 5).chunk(dist.get_world_size(), 0)[dist.get_rank()][:, :rows]
        s = piece.sum((0, 1))
        dist.all_reduce(s)
        return s
    return Case(single=Fn(lambda x: x.sum(0)), distributed=lambda r, w: Fn(local), inputs={"x": torch.randn(12, 5)},
                world_size=2, expect={"out": "Replicate()"})


def test_sum_over_a_split_view_is_the_sum_over_the_dim_it_split():
    assert verify(_split_view_sum_case()).status == "verified"


def test_sum_over_part_of_a_split_dim_is_a_violation():
    assert verify(_split_view_sum_case(rows=2)).status == "violation"
