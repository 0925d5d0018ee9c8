"""Recipe: StableHLO and HLO text from JAX, as a user dumps it, then verified from the text.

    python examples/jax/make_stablehlo.py /tmp/jax_dumps      # single.mlir, tp.mlir, tp.bug.mlir
    shardproof verify --seq /tmp/jax_dumps/single.mlir --dist /tmp/jax_dumps/tp.mlir \
        --auto-relations --expect 'out0=Replicate()'                  # verified
    shardproof verify --seq /tmp/jax_dumps/single.mlir --dist /tmp/jax_dumps/tp.bug.mlir \
        --auto-relations --expect 'out0=Replicate()'                  # violation: partial-sum-never-reduced

The programs are examples/jax/jax_models.py's tensor-parallel MLP: ``tanh(x @ w1) @ w2``
single-device, and a ``shard_map`` over 4 host devices (w1 column-, w2 row-sharded, then
``psum``; the bug drops the psum). Each is written with
``jax.jit(f).lower(*args).as_text()`` (StableHLO); the shard_map module is one SPMD program
every partition runs (``mhlo.num_partitions`` = 4). Its arguments are the per-partition
shards, so ``--auto-relations`` relates them to the single-device arguments of the same name
(``arg0``, ``arg1``, ...) by shape (w1: Shard(1), w2: Shard(0)). State ``--expect``: without
it any recoverable output passes, and the bug's output is recoverable (a Partial("sum")).
``as_text(dialect="hlo")`` of a shard_map module (JAX 0.10, Shardy) calls
``xla.sdy.manual_computation_body`` without defining it, so shardproof refuses that HLO
(exit 3): dump StableHLO.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jax_models import tp_mlp_case  # noqa: E402  (sets up 8 host devices before importing jax)

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec  # noqa: E402

WORLD = 4


def lowered(case, mesh=None):
    values = [np.asarray(v) for v in case.inputs.values()]
    if mesh is None:
        return jax.jit(case.single).lower(*values)
    shaped = [jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=NamedSharding(mesh, case.in_specs.get(n, PartitionSpec())))
              for n, v in zip(case.inputs, values)]
    return jax.jit(case.distributed(mesh)).lower(*shaped)


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    mesh = jax.make_mesh((WORLD,), ("tp",), devices=jax.devices("cpu")[:WORLD])
    programs = {"single": lowered(tp_mlp_case(WORLD)), "tp": lowered(tp_mlp_case(WORLD), mesh),
                "tp.bug": lowered(tp_mlp_case(WORLD, bug="no_psum"), mesh)}
    for name, low in programs.items():
        with open(os.path.join(out, f"{name}.mlir"), "w") as f:
            f.write(low.as_text())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "jax_dumps")
