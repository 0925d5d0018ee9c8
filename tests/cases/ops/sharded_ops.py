"""Small TP/SP programs using the ops of issue 15's "ordinary ops with no rule", each with a
buggy twin. Labels are confirmed on a real gloo group by tests/test_ops_sharded.py.

Two patterns:
- row-parallel (``b`` [4, 8] split along dim 1, ``w`` [8, 6] along dim 0): the op applied to
  the all-reduced product is correct; applied to the partial product before the all_reduce
  it is a bug (the ops are not linear);
- sequence-parallel (``a`` [8, 4] split along dim 0): the op along dim 1 on each rank's rows,
  then all-gathered, is correct, as is the op along dim 0 on the gathered rows; along dim 0
  on the local rows it is a bug.
Random ops (bernoulli, dropout) draw from the same seed on every rank, on a replicated
tensor: the same randomness for corresponding elements, the convention they declare."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from shardproof import Case

IDX = torch.tensor([0, 2, 0])   # index_add along dim 1 of a (4 columns)
IDX0 = torch.tensor([0, 1, 0])  # index_add along dim 0 (rows 0 and 1: local rows on every rank)


def R(p):
    dist.all_reduce(p)
    return p


def G(x):
    out = x.new_empty(dist.get_world_size() * x.shape[0], *x.shape[1:])
    dist.all_gather_into_tensor(out, x.contiguous())
    return out


def _seeded(fn):
    def run(h):
        torch.manual_seed(0)
        return fn(h)
    return run


def _clip_grad_norm(h):
    """torch.nn.utils.clip_grad_norm_ (its total norm is linalg_vector_norm) on a gradient h."""
    p = torch.nn.Parameter(torch.zeros_like(h))
    p.grad = h.clone()
    torch.nn.utils.clip_grad_norm_([p], 1.0)
    return p.grad


# nonlinear ops applied to the row-parallel product h = b @ w
ON_PRODUCT = {
    "softplus": F.softplus,
    "round": torch.round,
    "floor": torch.floor,
    "logsumexp": lambda h: torch.logsumexp(h, 1),
    "vector_norm": lambda h: torch.linalg.vector_norm(h, dim=1),
    "normalize": lambda h: F.normalize(h, dim=1),
    "clip_grad_norm": _clip_grad_norm,
    "topk": lambda h: torch.topk(h, 2, dim=1).values,
    "min": lambda h: h.min(dim=1).values,
    "prod": lambda h: h.prod(1),
    "std": lambda h: h.std(1),
    "mse_loss": lambda h: F.mse_loss(h, torch.ones_like(h)),
    "bernoulli": _seeded(lambda h: torch.bernoulli(torch.sigmoid(h))),
    "dropout": _seeded(lambda h: F.dropout(F.gelu(h), 0.5, training=True)),
    "randn": _seeded(lambda h: h + torch.randn(h.shape)),
    # no rule of their own: torch's decompositions at capture (addcmul, lerp, hardswish)
    "addcmul": lambda h: torch.addcmul(h, h, h.tanh(), value=0.5),
    "lerp": lambda h: torch.lerp(h.sin(), h, 0.3),
    "hardswish": F.hardswish,
}

# ops along a dim of the sequence-parallel a: (along dim 0, along dim 1)
ALONG = {
    "cumsum": (lambda x: x.cumsum(0), lambda x: x.cumsum(1)),
    "flip": (lambda x: x.flip([0]), lambda x: x.flip([1])),
    "roll": (lambda x: x.roll(1, 0), lambda x: x.roll(1, 1)),
    "pad": (lambda x: F.pad(x, (0, 0, 1, 1)), lambda x: F.pad(x, (1, 2))),
    "topk": (lambda x: torch.topk(x, 2, dim=0).values, lambda x: torch.topk(x, 2, dim=1).values),
}


LINEAR = {"cumsum": lambda h: h.cumsum(1), "flip": lambda h: h.flip([0, 1]), "roll": lambda h: h.roll(2, 1)}


def _variants():
    v = {}
    for name, f in ON_PRODUCT.items():
        v[f"{name}_after_reduce"] = (lambda a, b, w, s, s0, f=f: f(b @ w), lambda a, b, w, s, s0, f=f: f(R(b @ w)),
                                     "Replicate()", False)
        v[f"{name}_before_reduce"] = (lambda a, b, w, s, s0, f=f: f(b @ w), lambda a, b, w, s, s0, f=f: R(f(b @ w)),
                                      "Replicate()", True)
    for name, (f0, f1) in ALONG.items():
        v[f"{name}_other_dim"] = (lambda a, b, w, s, s0, f=f1: f(a), lambda a, b, w, s, s0, f=f1: G(f(a)), "Replicate()", False)
        v[f"{name}_gathered"] = (lambda a, b, w, s, s0, f=f0: f(a), lambda a, b, w, s, s0, f=f0: f(G(a)), "Replicate()", False)
        v[f"{name}_local"] = (lambda a, b, w, s, s0, f=f0: f(a), lambda a, b, w, s, s0, f=f0: G(f(a)), "Replicate()", True)
    v["index_add_other_dim"] = (lambda a, b, w, s, s0: a.index_add(1, IDX, s),
                                lambda a, b, w, s, s0: G(a.index_add(1, IDX, s)), "Replicate()", False)
    v["index_add_gathered"] = (lambda a, b, w, s, s0: a.index_add(0, IDX0, s0),
                               lambda a, b, w, s, s0: G(a).index_add(0, IDX0, s0), "Replicate()", False)
    v["index_add_local"] = (lambda a, b, w, s, s0: a.index_add(0, IDX0, s0),
                            lambda a, b, w, s, s0: G(a.index_add(0, IDX0, s0)), "Replicate()", True)
    # a data-dependent size: the indices of the positive elements need the whole tensor
    v["nonzero_gathered"] = (lambda a, b, w, s, s0: torch.nonzero(a > 0), lambda a, b, w, s, s0: torch.nonzero(G(a) > 0),
                             "Replicate()", False)
    v["nonzero_local"] = (lambda a, b, w, s, s0: torch.nonzero(a > 0), lambda a, b, w, s, s0: torch.nonzero(a > 0),
                          "Replicate()", True)
    # linear ops commute with the all_reduce: applied to the partial product, still correct
    for name, f in LINEAR.items():
        v[f"{name}_before_reduce_linear"] = (lambda a, b, w, s, s0, f=f: f(b @ w),
                                             lambda a, b, w, s, s0, f=f: R(f(b @ w)), "Replicate()", False)
    # a scan with a carry: the local running sum plus the totals of the ranks before (correct;
    # the relations have no lemma for the carry yet: honestly unknown, never a violation)
    v["cumsum_with_carry"] = (lambda a, b, w, s, s0: a.cumsum(0), lambda a, b, w, s, s0: G(_carried_cumsum(a)),
                              "Replicate()", False)
    return v


def _carried_cumsum(x):
    totals = G(x.sum(0, keepdim=True))
    carry = (totals.cumsum(0) - totals)[dist.get_rank()]
    return x.cumsum(0) + carry


UNKNOWN_OK = {"cumsum_with_carry"}
VARIANTS = _variants()
BUGGY = {k for k, v in VARIANTS.items() if v[3]}
# where the finding must be: the op applied to shards it cannot be applied to (the first
# non-linear op on the partial product: sigmoid before bernoulli, gelu before dropout,
# the norm inside F.normalize)
_FIRST_NONLINEAR = {"bernoulli": "aten.sigmoid", "dropout": "aten.gelu", "normalize": "aten.linalg_vector_norm",
                    "vector_norm": "aten.linalg_vector_norm",
                    "clip_grad_norm": "aten.linalg_vector_norm", "pad": "aten.constant_pad_nd",
                    "addcmul": "aten.tanh", "randn": "aten.add", "lerp": "aten.sin", "hardswish": "aten.add"}
DECOMPOSED = {"addcmul", "lerp", "hardswish"}  # captured through torch's decompositions
BUG_OPS = {v: _FIRST_NONLINEAR.get(v.rsplit("_", 2)[0] if v.endswith("_reduce") else v.rsplit("_", 1)[0],
                                    "aten." + (v.rsplit("_", 2)[0] if v.endswith("_reduce") else v.rsplit("_", 1)[0]))
           for v in BUGGY}
RANDOM = {v for v in VARIANTS if v.startswith(("bernoulli", "dropout", "randn"))}


def _shard(rank, world, inputs):
    return {"a": inputs["a"].chunk(world, 0)[rank], "b": inputs["b"].chunk(world, 1)[rank],
            "w": inputs["w"].chunk(world, 0)[rank], "s": inputs["s"].chunk(world, 0)[rank], "s0": inputs["s0"]}


def build(world_size: int, variant: str, seed: int = 0) -> Case:
    single, per_rank, expect, buggy = VARIANTS[variant]
    g = torch.Generator().manual_seed(seed)
    inputs = {"a": torch.randn(8, 4, generator=g), "b": torch.randn(4, 8, generator=g),
              "w": torch.randn(8, 6, generator=g), "s": torch.randn(8, 3, generator=g),
              "s0": torch.randn(3, 4, generator=g)}
    return Case(single=single, distributed=lambda rank, world: per_rank, inputs=inputs, dist_inputs=_shard,
                world_size=world_size, name=f"ops_{variant}", expect={"out": expect}, meta={"buggy": buggy})


def case(world_size: int = 2, variant: str = "cumsum_other_dim") -> Case:
    return build(world_size, variant)
