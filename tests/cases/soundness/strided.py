"""Soundness class 6 (issue 14): a convention a rule relies on must be checked on the graph.
``as_strided`` reads its input's *storage*: on a transposed or sliced view that is not the
view's elements in order. The input ``x`` [B, M, N] is sharded along the batch (dim 0);
each variant's per-rank program takes an as_strided view of a view of its shard. Labels
are confirmed on a real gloo group by tests/test_soundness_casts.py."""
import torch

from shardproof import Case

B, M, N = 6, 3, 4


def _b(x):
    return x.shape[0]


# variant -> (single(x), per-rank(x), expected output relation)
VARIANTS = {
    # the view's elements in order were meant (transpose, then flatten): reading the storage of
    # the transposed view gives the untransposed order (bug); made contiguous first (correct)
    "transposed_storage": (lambda x: x.transpose(1, 2).reshape(B, N * M),
                           lambda x: x.transpose(1, 2).as_strided((_b(x), N * M), (N * M, 1)), "Shard(0)"),
    "transposed_contiguous": (lambda x: x.transpose(1, 2).reshape(B, N * M),
                              lambda x: x.transpose(1, 2).contiguous().as_strided((_b(x), N * M), (N * M, 1)),
                              "Shard(0)"),
    # the storage was meant: flattening x through its transposed view's storage is correct
    "transposed_reads_base": (lambda x: x.reshape(B, M * N),
                              lambda x: x.transpose(1, 2).as_strided((_b(x), M * N), (M * N, 1)), "Shard(0)"),
    # a strided (every other element) read of a permuted view
    "permuted_strided_bug": (lambda x: x.permute(0, 2, 1).reshape(B, -1)[:, ::2],
                             lambda x: x.permute(0, 2, 1).as_strided((_b(x), M * N // 2), (M * N, 2)), "Shard(0)"),
    "permuted_strided_ok": (lambda x: x.reshape(B, -1)[:, ::2],
                            lambda x: x.permute(0, 2, 1).as_strided((_b(x), M * N // 2), (M * N, 2)), "Shard(0)"),
    # the storage offset is absolute, not relative to the sliced view it is applied to
    "offset_relative_bug": (lambda x: x[:, 2:],
                            lambda x: x[:, 1:].as_strided((_b(x), M - 2, N), (M * N, N, 1), N), "Shard(0)"),
    "offset_absolute_ok": (lambda x: x[:, 1:M - 1],
                           lambda x: x[:, 1:].as_strided((_b(x), M - 2, N), (M * N, N, 1), N), "Shard(0)"),
    # correct, but it reads storage outside its input view's elements (the rows before the slice):
    # a rule that sees only the view's elements cannot tell, so the check makes it unknown
    "reads_before_view": (lambda x: x[:, :M - 1],
                          lambda x: x[:, 1:].as_strided((_b(x), M - 1, N), (M * N, N, 1), 0), "Shard(0)"),
}
UNKNOWN_OK = {"reads_before_view"}
BUGGY = {"transposed_storage", "permuted_strided_bug", "offset_relative_bug"}
BUG_OPS = {v: {"aten.as_strided"} for v in BUGGY}


def _shard(rank, world, inputs):
    return {"x": inputs["x"].chunk(world, 0)[rank].clone()}  # a fresh, contiguous buffer per rank


def build(world_size: int, variant: str, seed: int = 0) -> Case:
    single, per_rank, expect = VARIANTS[variant]
    g = torch.Generator().manual_seed(seed)
    return Case(single=single, distributed=lambda rank, world: per_rank, inputs={"x": torch.randn(B, M, N, generator=g)},
                dist_inputs=_shard, world_size=world_size, name=f"strided_{variant}", expect={"out": expect},
                meta={"buggy": variant in BUGGY})


def case(world_size: int = 2, variant: str = "transposed_storage") -> Case:
    return build(world_size, variant)
