"""A small CNN, sharded the ways vision models are, each with a buggy twin (issue 15, core-ATen
coverage). Labels are confirmed on a real gloo group by tests/test_vision_sharded.py.

Inputs: images ``x`` [4, 4, 8, 8]; conv weights ``w1`` [8, 4, 3, 3] (bias ``b1``), ``w2``
[6, 8, 3, 3]; per-channel ``gamma``/``beta`` [8].
- data parallel: ``x`` split along the batch, weights replicated; conv, relu, max pool, group
  norm, conv, adaptive pool on each rank's samples, then all-gathered (correct);
- output channels: ``w1``/``b1`` split along dim 0, conv and max pool on each rank's channels,
  then all-gathered along the channels (correct);
- input channels: ``x`` and ``w1`` split along dim 1, a partial sum all-reduced, the bias added
  after (correct) or on every rank before the all_reduce (bug: the bias counted twice);
- batch norm over a batch shard: statistics of the local samples only (bug), or the
  SyncBatchNorm way, local sums and sums of squares all-reduced (correct; the single device
  computes the same statistics over the whole batch);
- spatial shards (rows of the image): a 3x3 conv or max pool without the neighbour rows (bug);
- depthwise conv (``wd`` [4, 1, 3, 3], groups = channels) over a channel shard of ``x`` and
  the filters (correct), or with another rank's filters (bug)."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from shardproof import Case

EPS = 1e-5


def G(x, dim=0):
    """All-gather along `dim`."""
    x = x.movedim(dim, 0).contiguous()
    out = x.new_empty(dist.get_world_size() * x.shape[0], *x.shape[1:])
    dist.all_gather_into_tensor(out, x)
    return out.movedim(0, dim)


def R(p):
    dist.all_reduce(p)
    return p


def net(x, w1, b1, w2, gamma, beta):
    h = F.max_pool2d(F.relu(F.conv2d(x, w1, b1, padding=1)), 2)
    h = F.group_norm(h, 2, gamma, beta)
    return F.adaptive_avg_pool2d(F.conv2d(h, w2, padding=1), 2)


def _bn_stats(sums, sumsq, n):
    mean = sums / n
    return mean, sumsq / n - mean * mean


def _bn_apply(x, mean, var, gamma, beta):
    c = (1, -1, 1, 1)
    return (x - mean.view(c)) * torch.rsqrt(var.view(c) + EPS) * gamma.view(c) + beta.view(c)


def bn_single(x, gamma, beta):
    mean, var = _bn_stats(x.sum((0, 2, 3)), (x * x).sum((0, 2, 3)), x.shape[0] * x.shape[2] * x.shape[3])
    return _bn_apply(x, mean, var, gamma, beta)


def bn_synced(x, gamma, beta):
    """SyncBatchNorm's statistics: the ranks' sums and sums of squares, all-reduced."""
    n = x.shape[0] * dist.get_world_size() * x.shape[2] * x.shape[3]
    mean, var = _bn_stats(R(x.sum((0, 2, 3))), R((x * x).sum((0, 2, 3))), n)
    return _bn_apply(x, mean, var, gamma, beta)


def _conv_pool(x, w1, b1):
    return F.max_pool2d(F.relu(F.conv2d(x, w1, b1, padding=1)), 2)


# variant -> (single, per-rank program, how the inputs are split, buggy)
VARIANTS = {
    "data_parallel": (lambda x, w1, b1, w2, gamma, beta, **k: net(x, w1, b1, w2, gamma, beta),
                      lambda x, w1, b1, w2, gamma, beta, **k: G(net(x, w1, b1, w2, gamma, beta)), {"x": 0}, False),
    "out_channels": (lambda x, w1, b1, **k: _conv_pool(x, w1, b1),
                     lambda x, w1, b1, **k: G(_conv_pool(x, w1, b1), 1), {"w1": 0, "b1": 0}, False),
    "in_channels": (lambda x, w1, b1, **k: F.conv2d(x, w1, b1, padding=1),
                    lambda x, w1, b1, **k: R(F.conv2d(x, w1, padding=1)) + b1.view(1, -1, 1, 1),
                    {"x": 1, "w1": 1}, False),
    "in_channels_bias_twice": (lambda x, w1, b1, **k: F.conv2d(x, w1, b1, padding=1),
                               lambda x, w1, b1, **k: R(F.conv2d(x, w1, b1, padding=1)), {"x": 1, "w1": 1}, True),
    "batch_norm_local_stats": (lambda x, gamma, beta, **k: F.batch_norm(F.conv2d(x, k["w1"]), None, None, gamma,
                                                                        beta, training=True, eps=EPS),
                               lambda x, gamma, beta, **k: G(F.batch_norm(F.conv2d(x, k["w1"]), None, None, gamma,
                                                                          beta, training=True, eps=EPS)),
                               {"x": 0}, True),
    "batch_norm_synced": (lambda x, gamma, beta, **k: bn_single(F.conv2d(x, k["w1"]), gamma, beta),
                          lambda x, gamma, beta, **k: G(bn_synced(F.conv2d(x, k["w1"]), gamma, beta)), {"x": 0}, False),
    # the single device's own batch norm against the synced statistics written by hand: correct; relating
    # them needs E[x^2] - E[x]^2 = var (a polynomial identity): verified or honestly unknown, never a violation
    "batch_norm_synced_vs_functional": (lambda x, gamma, beta, **k: F.batch_norm(F.conv2d(x, k["w1"]), None, None,
                                                                                 gamma, beta, training=True, eps=EPS),
                                        lambda x, gamma, beta, **k: G(bn_synced(F.conv2d(x, k["w1"]), gamma, beta)),
                                        {"x": 0}, False),
    "conv_rows_no_halo": (lambda x, w1, b1, **k: F.conv2d(x, w1, b1, padding=1),
                          lambda x, w1, b1, **k: G(F.conv2d(x, w1, b1, padding=1), 2), {"x": 2}, True),
    "depthwise_channels": (lambda x, wd, **k: F.conv2d(x, wd, padding=1, groups=x.shape[1]),
                           lambda x, wd, **k: G(F.conv2d(x, wd, padding=1, groups=x.shape[1]), 1),
                           {"x": 1, "wd": 0}, False),
    "depthwise_other_filters": (lambda x, wd, **k: F.conv2d(x, wd, padding=1, groups=x.shape[1]),
                                lambda x, wd, **k: G(F.conv2d(x, wd.flip(0), padding=1, groups=x.shape[1]), 1),
                                {"x": 1, "wd": 0}, True),
    "max_pool_rows_no_halo": (lambda x, **k: F.max_pool2d(x, 3, 1, 1),
                              lambda x, **k: G(F.max_pool2d(x, 3, 1, 1), 2), {"x": 2}, True),
}
BUGGY = {k for k, v in VARIANTS.items() if v[3]}
UNKNOWN_OK = {"batch_norm_synced_vs_functional"}
# the node a violation must name
BUG_OPS = {"in_channels_bias_twice": {"aten.convolution", "_c10d_functional.all_reduce"},
           "batch_norm_local_stats": {"aten._native_batch_norm_legit", "aten._native_batch_norm_legit_functional"},
           "conv_rows_no_halo": {"aten.convolution"}, "depthwise_other_filters": {"aten.flip", "aten.convolution"},
           "max_pool_rows_no_halo": {"aten.max_pool2d_with_indices"}}


def _program(fn):
    def program(x, w1, b1, w2, gamma, beta, wd):
        return fn(x=x, w1=w1, b1=b1, w2=w2, gamma=gamma, beta=beta, wd=wd)
    return program


def build(world_size: int, variant: str, seed: int = 0) -> Case:
    single, per_rank, split, buggy = VARIANTS[variant]
    g = torch.Generator().manual_seed(seed)
    inputs = {"x": torch.randn(4, 4, 8, 8, generator=g), "w1": torch.randn(8, 4, 3, 3, generator=g) * 0.3,
              "b1": torch.randn(8, generator=g), "w2": torch.randn(6, 8, 3, 3, generator=g) * 0.2,
              "gamma": torch.rand(8, generator=g) + 0.5, "beta": torch.randn(8, generator=g),
              "wd": torch.randn(4, 1, 3, 3, generator=g)}

    def shard(rank, world, data):
        return {k: v.chunk(world, split[k])[rank] if k in split else v for k, v in data.items()}
    return Case(single=_program(single), distributed=lambda rank, world: _program(per_rank), inputs=inputs,
                dist_inputs=shard, world_size=world_size, name=f"vision_{variant}", expect={"out": "Replicate()"},
                meta={"buggy": buggy})


def case(world_size: int = 2, variant: str = "data_parallel") -> Case:
    return build(world_size, variant)
