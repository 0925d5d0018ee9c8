"""JAX programs for the JAX cases: an MLP and an attention block, single-device and
tensor/sequence parallel with shard_map over a 1-D mesh axis "tp". `bug` injects one
mistake into the parallel program ("no_psum": the row-parallel partial sums are never
reduced; "gather_axis": the sequence-parallel all_gather concatenates the wrong axis)."""
from shardproof.frontends.jax_lower import host_devices

host_devices(8)  # before jax is imported

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

try:
    from jax import shard_map
except ImportError:  # older JAX
    from jax.experimental.shard_map import shard_map

from shardproof import Case  # noqa: E402

TOKENS, HIDDEN, FFN, HEADS, HEAD_DIM = 8, 16, 32, 4, 4


def mlp(x, w1, w2):
    return jnp.tanh(x @ w1) @ w2


def attention(x, wq, wk, wv, wo, heads=HEADS):
    t = x.shape[0]
    q, k, v = ((x @ w).reshape(t, heads, -1) for w in (wq, wk, wv))
    scores = jnp.einsum("thd,shd->hts", q, k) / np.sqrt(q.shape[-1])
    probs = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("hts,shd->thd", probs, v).reshape(t, -1) @ wo


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def unchecked(**kw):
    """shard_map options that let a buggy program claim a replicated output (JAX would
    otherwise refuse the missing psum before we could show it)."""
    import inspect
    params = inspect.signature(shard_map).parameters
    return {k: False for k in ("check_vma", "check_rep") if k in params} if kw.get("bug") else {}


def tp_mlp_case(world_size=4, bug=None):
    def body(x, w1, w2):
        y = mlp(x, w1, w2)
        return y if bug == "no_psum" else jax.lax.psum(y, "tp")

    return Case(single=mlp, backend="jax", name="jax tp_mlp",
                distributed=lambda mesh: shard_map(body, mesh=mesh, in_specs=(P(), P(None, "tp"), P("tp", None)),
                                                   out_specs=P(), **unchecked(bug=bug == "no_psum")),
                inputs={"x": _rand(TOKENS, HIDDEN), "w1": _rand(HIDDEN, FFN, seed=1), "w2": _rand(FFN, HIDDEN, seed=2)},
                in_specs={"w1": P(None, "tp"), "w2": P("tp", None)}, expect={"out0": "Replicate()"},
                world_size=world_size)


def tp_attention_case(world_size=4, bug=None):
    def body(x, wq, wk, wv, wo):
        y = attention(x, wq, wk, wv, wo, heads=HEADS // world_size)
        return y if bug == "no_psum" else jax.lax.psum(y, "tp")

    col = P(None, "tp")
    return Case(single=attention, backend="jax", name="jax tp_attention",
                distributed=lambda mesh: shard_map(body, mesh=mesh, in_specs=(P(), col, col, col, P("tp", None)),
                                                   out_specs=P(), **unchecked(bug=bug == "no_psum")),
                inputs={"x": _rand(TOKENS, HIDDEN), **{w: _rand(HIDDEN, HIDDEN, seed=i + 1)
                                                        for i, w in enumerate(("wq", "wk", "wv", "wo"))}},
                in_specs={"wq": col, "wk": col, "wv": col, "wo": P("tp", None)}, expect={"out0": "Replicate()"},
                world_size=world_size)


def sp_mlp_case(world_size=4, bug=None):
    """Sequence parallel: tokens sharded; all_gather them for the tensor-parallel MLP, then
    reduce-scatter the partial sums back to token shards."""
    def body(x, w1, w2):
        full = jax.lax.all_gather(x, "tp", axis=1 if bug == "gather_axis" else 0, tiled=True)
        if bug == "gather_axis":
            full = full.reshape(x.shape[0] * world_size, -1)
        return jax.lax.psum_scatter(mlp(full, w1, w2), "tp", scatter_dimension=0, tiled=True)

    return Case(single=mlp, backend="jax", name="jax sp_mlp",
                distributed=lambda mesh: shard_map(body, mesh=mesh,
                                                   in_specs=(P("tp", None), P(None, "tp"), P("tp", None)),
                                                   out_specs=P("tp", None)),
                inputs={"x": _rand(TOKENS, HIDDEN), "w1": _rand(HIDDEN, FFN, seed=1), "w2": _rand(FFN, HIDDEN, seed=2)},
                in_specs={"x": P("tp", None), "w1": P(None, "tp"), "w2": P("tp", None)}, expect={"out0": "Shard(0)"},
                world_size=world_size)
