"""Soundness class 4 (issue 14): extents of constant fills and broadcast size-1 dims. The
inputs ``x`` [B, S] and ``z`` [B, S + 1] (uneven shards) are sharded along the sequence
(dim 1), ``y`` [B, 1] is replicated. A fill
of the rank's local size is not the global fill, and a sum over n broadcast repeats is
n times the element: a loss normalized by the per-rank count is a bug, by the global count
it is correct. Labels are confirmed on a real gloo group by tests/test_soundness_casts.py."""
import torch
import torch.distributed as dist

from shardproof import Case

B, S, W = 2, 12, 12


def _reduced(p):
    dist.all_reduce(p)
    return p


def _local(x):
    return x.shape[1]


def _world():
    return dist.get_world_size()


# variant -> (single(x, y, z), per-rank(x, y, z), expected output relation)
VARIANTS = {
    # a token count from a fill: local (bug) vs all-reduced or scaled to the global count (correct)
    "zeros_count_local": (lambda x, y, z: x.sum() / (1 - torch.zeros(B, S)).sum(),
                          lambda x, y, z: _reduced(x.sum() / (1 - torch.zeros(B, _local(x))).sum()), "Replicate()"),
    "zeros_count_reduced": (lambda x, y, z: x.sum() / (1 - torch.zeros(B, S)).sum(),
                            lambda x, y, z: _reduced(x.sum()) / _reduced((1 - torch.zeros(B, _local(x))).sum()),
                            "Replicate()"),
    "ones_rows_local": (lambda x, y, z: x.sum(1) / torch.ones(B, S).sum(1),
                        lambda x, y, z: _reduced(x.sum(1) / torch.ones(B, _local(x)).sum(1)), "Replicate()"),
    "ones_rows_reduced": (lambda x, y, z: x.sum(1) / torch.ones(B, S).sum(1),
                          lambda x, y, z: _reduced(x.sum(1)) / _reduced(torch.ones(B, _local(x)).sum(1)), "Replicate()"),
    "full_int_local": (lambda x, y, z: x.sum() / torch.full((B, S), 1, dtype=torch.int64).sum(),
                       lambda x, y, z: _reduced(x.sum() / torch.full((B, _local(x)), 1, dtype=torch.int64).sum()),
                       "Replicate()"),
    "full_int_scaled": (lambda x, y, z: x.sum() / torch.full((B, S), 1, dtype=torch.int64).sum(),
                        lambda x, y, z: _reduced(x.sum()) / (torch.full((B, _local(x)), 1, dtype=torch.int64).sum()
                                                          * _world()), "Replicate()"),
    "ones_like_local": (lambda x, y, z: (x * x).sum() / torch.ones_like(x).sum(),
                        lambda x, y, z: _reduced((x * x).sum() / torch.ones_like(x).sum()), "Replicate()"),
    "ones_like_reduced": (lambda x, y, z: (x * x).sum() / torch.ones_like(x).sum(),
                          lambda x, y, z: _reduced((x * x).sum()) / _reduced(torch.ones_like(x).sum()), "Replicate()"),
    # uneven sequence shards (z: 13 positions): each rank's count differs; world x local count is wrong
    "uneven_count_reduced": (lambda x, y, z: z.sum() / torch.ones(B, S + 1).sum(),
                             lambda x, y, z: _reduced(z.sum()) / _reduced(torch.ones(B, _local(z)).sum()),
                             "Replicate()"),
    "uneven_count_scaled": (lambda x, y, z: z.sum() / torch.ones(B, S + 1).sum(),
                            lambda x, y, z: _reduced(z.sum()) / (torch.ones(B, _local(z)).sum() * _world()),
                            "Replicate()"),
    # the count through a view of the fill
    "flatten_count_local": (lambda x, y, z: x.sum() / torch.ones(B, S).flatten().sum(),
                            lambda x, y, z: _reduced(x.sum() / torch.ones(B, _local(x)).flatten().sum()), "Replicate()"),
    "flatten_count_reduced": (lambda x, y, z: x.sum() / torch.ones(B, S).flatten().sum(),
                              lambda x, y, z: _reduced(x.sum()) / _reduced(torch.ones(B, _local(x)).flatten().sum()),
                              "Replicate()"),
    # a sum over broadcast repeats of a size-1 dim counts them
    "expand_sum_unreduced": (lambda x, y, z: torch.exp(y.expand(-1, W)).sum(-1),
                             lambda x, y, z: torch.exp(y.expand(-1, W // _world())).sum(-1), "Replicate()"),
    "expand_sum_reduced": (lambda x, y, z: torch.exp(y.expand(-1, W)).sum(-1),
                           lambda x, y, z: _reduced(torch.exp(y.expand(-1, W // _world())).sum(-1)), "Replicate()"),
    "expand_sum_int": (lambda x, y, z: (y > 0).long().expand(-1, W).sum(-1),
                       lambda x, y, z: (y > 0).long().expand(-1, W // _world()).sum(-1), "Replicate()"),
    # equivalence traps: a mean over repeats is the element; a fill's per-position count is local
    "expand_mean": (lambda x, y, z: torch.exp(y.expand(-1, W)).mean(-1),
                    lambda x, y, z: torch.exp(y.expand(-1, W // _world())).mean(-1), "Replicate()"),
    "fill_column_counts": (lambda x, y, z: (torch.zeros(B, S) + 1).sum(0), lambda x, y, z: (torch.zeros(B, _local(x)) + 1).sum(0),
                           "Shard(0)"),
    "expand_times_x": (lambda x, y, z: (x * y.expand(-1, S)).sum(1), lambda x, y, z: _reduced((x * y.expand(-1, _local(x))).sum(1)),
                       "Replicate()"),
}
BUGGY = {"flatten_count_local", "uneven_count_scaled", "zeros_count_local", "ones_rows_local", "full_int_local", "ones_like_local", "expand_sum_unreduced",
         "expand_sum_int"}
# the finding: the division by the local count, or the sum over the local repeats
BUG_OPS = {v: {"aten.div", "aten.sum"} for v in BUGGY}
# correct, but the output holds a repeated position of a fill the relations do not yet name:
# honestly unknown (never a violation)
UNKNOWN_OK = {"fill_column_counts"}


def _shard(rank, world, inputs):
    return {"x": inputs["x"].chunk(world, 1)[rank], "y": inputs["y"], "z": inputs["z"].chunk(world, 1)[rank]}


def build(world_size: int, variant: str, seed: int = 0) -> Case:
    single, per_rank, expect = VARIANTS[variant]
    g = torch.Generator().manual_seed(seed)
    inputs = {"x": torch.randn(B, S, generator=g), "y": torch.randn(B, 1, generator=g),
              "z": torch.randn(B, S + 1, generator=g)}
    return Case(single=single, distributed=lambda rank, world: per_rank, inputs=inputs, dist_inputs=_shard,
                world_size=world_size, name=f"fills_{variant}", expect={"out": expect},
                meta={"buggy": variant in BUGGY})


def case(world_size: int = 2, variant: str = "zeros_count_local") -> Case:
    return build(world_size, variant)
