"""Soundness class 1 (issue 14): value-changing casts. Each variant is a single-device
function and a per-rank function over a batch-sharded input; ``BUGGY`` ones cast after a
reduction (or reduce before rounding) where the single-device program casts each element.
Labels are confirmed on a real gloo group by tests/test_soundness_casts.py."""
import torch
import torch.distributed as dist

from shardproof import Case

B, H = 6, 5


def _reduced(p):
    dist.all_reduce(p)
    return p


# variant -> (single(x, n, m, k), per-rank(x, n, m, k), expected output relation); m bool, k int32
VARIANTS = {
    # float -> int64 truncation: cast each element, then sum (correct) vs sum, then cast (bug)
    "long_then_sum": (lambda x, n, m, k: (x * 3).long().sum(0), lambda x, n, m, k: _reduced((x * 3).long().sum(0)), "Replicate()"),
    "sum_then_long": (lambda x, n, m, k: (x * 3).long().sum(0), lambda x, n, m, k: _reduced((x * 3).sum(0)).long(), "Replicate()"),
    # float -> int32
    "int32_then_sum": (lambda x, n, m, k: (x * 3).to(torch.int32).sum(0),
                       lambda x, n, m, k: _reduced((x * 3).to(torch.int32).sum(0)), "Replicate()"),
    "sum_then_int32": (lambda x, n, m, k: (x * 3).to(torch.int32).sum(0),
                       lambda x, n, m, k: _reduced((x * 3).sum(0)).to(torch.int32).long(), "Replicate()"),
    # float -> bool (nonzero)
    "bool_then_sum": (lambda x, n, m, k: torch.relu(x).bool().long().sum(0),
                      lambda x, n, m, k: _reduced(torch.relu(x).bool().long().sum(0)), "Replicate()"),
    "sum_then_bool": (lambda x, n, m, k: torch.relu(x).bool().long().sum(0),
                      lambda x, n, m, k: _reduced(torch.relu(x).sum(0)).bool().long(), "Replicate()"),
    # type_as an integer tensor
    "type_as_then_sum": (lambda x, n, m, k: (x * 3).type_as(n).sum(0), lambda x, n, m, k: _reduced((x * 3).type_as(n).sum(0)),
                         "Replicate()"),
    "sum_then_type_as": (lambda x, n, m, k: (x * 3).type_as(n).sum(0), lambda x, n, m, k: _reduced((x * 3).sum(0)).type_as(n),
                         "Replicate()"),
    # int64 -> int8 narrowing (wraps)
    "int8_then_sum": (lambda x, n, m, k: n.to(torch.int8).sum(0), lambda x, n, m, k: _reduced(n.to(torch.int8).sum(0)),
                      "Replicate()"),
    "sum_then_int8": (lambda x, n, m, k: n.to(torch.int8).sum(0),
                      lambda x, n, m, k: _reduced(n.sum(0)).to(torch.int8).long(), "Replicate()"),
    # bf16 -> int32 after a bf16 product
    "bf16_int_then_sum": (lambda x, n, m, k: (x.bfloat16() * 4).to(torch.int32).sum(0),
                          lambda x, n, m, k: _reduced((x.bfloat16() * 4).to(torch.int32).sum(0)), "Replicate()"),
    "bf16_sum_then_int": (lambda x, n, m, k: (x.bfloat16() * 4).to(torch.int32).sum(0),
                          lambda x, n, m, k: _reduced((x.bfloat16() * 4).float().sum(0)).to(torch.int32).long(),
                          "Replicate()"),
    # rounding ops
    "floor_then_sum": (lambda x, n, m, k: torch.floor(x * 3).sum(0), lambda x, n, m, k: _reduced(torch.floor(x * 3).sum(0)),
                       "Replicate()"),
    "sum_then_floor": (lambda x, n, m, k: torch.floor(x * 3).sum(0), lambda x, n, m, k: torch.floor(_reduced((x * 3).sum(0))),
                       "Replicate()"),
    "round_then_sum": (lambda x, n, m, k: torch.round(x * 3).sum(0), lambda x, n, m, k: _reduced(torch.round(x * 3).sum(0)),
                       "Replicate()"),
    "sum_then_round": (lambda x, n, m, k: torch.round(x * 3).sum(0), lambda x, n, m, k: torch.round(_reduced((x * 3).sum(0))),
                       "Replicate()"),
    # copy_ into an integer buffer converts (truncates) too
    "copy_long_then_sum": (lambda x, n, m, k: (x * 3).long().sum(0),
                           lambda x, n, m, k: _reduced(torch.empty(x.shape, dtype=torch.int64).copy_(x * 3).sum(0)),
                           "Replicate()"),
    "sum_then_copy_long": (lambda x, n, m, k: (x * 3).long().sum(0),
                           lambda x, n, m, k: torch.empty(H, dtype=torch.int64).copy_(_reduced((x * 3).sum(0))),
                           "Replicate()"),
    # bitwise on integers is not the logical op (6 & 3 == 2, logical_and(6, 3) is true)
    "logical_and_sum": (lambda x, n, m, k: torch.logical_and(n, n // 3).long().sum(0),
                        lambda x, n, m, k: _reduced(torch.logical_and(n, n // 3).long().sum(0)), "Replicate()"),
    "bitwise_and_sum": (lambda x, n, m, k: torch.logical_and(n, n // 3).long().sum(0),
                        lambda x, n, m, k: _reduced((n & (n // 3)).sum(0)), "Replicate()"),
    # bool input: "any" (a cast to bool) of a partial count is not the any of the whole count
    "any_after_reduce": (lambda x, n, m, k: m.long().sum(0).bool().long(),
                         lambda x, n, m, k: _reduced(m.long().sum(0)).bool().long(), "Replicate()"),
    "any_before_reduce": (lambda x, n, m, k: m.long().sum(0).bool().long(),
                          lambda x, n, m, k: _reduced(m.long().sum(0).bool().long()), "Replicate()"),
    "bool_count": (lambda x, n, m, k: m.sum(0), lambda x, n, m, k: _reduced(m.sum(0)), "Replicate()"),
    # int32 input: an int32 sum is an int64 in torch, so widening before or after agrees
    "int32_widen": (lambda x, n, m, k: k.long().sum(0), lambda x, n, m, k: _reduced(k.sum(0)), "Replicate()"),
    "int32_narrow_after_sum": (lambda x, n, m, k: k.to(torch.int16).sum(0),
                               lambda x, n, m, k: _reduced(k.sum(0)).to(torch.int16).long(), "Replicate()"),
    # equivalence traps: a cast commutes with sharding; widening an int after the sum is exact;
    # float casts keep the value (the precision convention)
    "long_sharded": (lambda x, n, m, k: (x * 3).long(), lambda x, n, m, k: (x * 3).long(), "Shard(0)"),
    "widen_after_sum": (lambda x, n, m, k: n.to(torch.int32).long().sum(0),
                        lambda x, n, m, k: _reduced(n.to(torch.int32).sum(0)).long(), "Replicate()"),
    "bf16_float_sum": (lambda x, n, m, k: x.bfloat16().double().sum(0),
                       lambda x, n, m, k: _reduced(x.bfloat16().double().sum(0)), "Replicate()"),
}
BUGGY = {"sum_then_long", "sum_then_int32", "sum_then_bool", "sum_then_type_as", "sum_then_int8", "bf16_sum_then_int",
         "sum_then_floor", "sum_then_round", "bitwise_and_sum", "sum_then_copy_long",
         "any_before_reduce", "int32_narrow_after_sum"}
# where the finding must be: the local sum of the un-cast values (the single-device program
# sums cast values) or the cast applied after the reduction
BUG_OPS = {v: {"aten.sum", "aten._to_copy", "aten.copy", "aten.floor", "aten.round"} for v in BUGGY}
# (the localization takes the integer partial sums for rank-local index pieces: found at the reduced copy)
BUG_OPS["bitwise_and_sum"] = {"aten.bitwise_and", "aten.sum", "aten.copy"}


def _shard(rank, world, inputs):
    return {k: v.chunk(world, 0)[rank] for k, v in inputs.items()}


def build(world_size: int, variant: str, seed: int = 0) -> Case:
    single, per_rank, expect = VARIANTS[variant]
    g = torch.Generator().manual_seed(seed)
    inputs = {"x": torch.randn(B, H, generator=g) * 2, "n": torch.randint(-1000, 1000, (B, H), generator=g),
              "m": torch.rand(B, H, generator=g) > 0.7,
              "k": torch.randint(-2 ** 20, 2 ** 20, (B, H), generator=g, dtype=torch.int32)}
    return Case(single=single, distributed=lambda rank, world: per_rank, inputs=inputs, dist_inputs=_shard,
                world_size=world_size, name=f"casts_{variant}", expect={"out": expect},
                meta={"buggy": variant in BUGGY})


def case(world_size: int = 2, variant: str = "sum_then_long") -> Case:
    return build(world_size, variant)
