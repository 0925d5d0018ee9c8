"""Grouped-query attention from one fused QKV projection laid out as torchtitan's ``wqkv``
(per key/value group: its G query heads, then its key head, then its value head), the
weight's rows split over ranks by whole groups (colwise): each rank attends with its own
groups' heads, no communication; the output's heads are Shard(2) of [B, S, heads * D].

Buggy twin (``bug=True``): a rank rotates its key heads by one group (query heads of group
0 read group 1's keys)."""
import torch
import torch.nn.functional as F

from shardproof import Case

B, S, NKV, G, D, DIM = 2, 8, 4, 2, 8, 16


def attention(x, wqkv, bug=False):
    nkv = wqkv.shape[0] // ((G + 2) * D)
    qkv = (x @ wqkv.T).view(B, S, nkv, G + 2, D)
    q, k, v = torch.split(qkv, [G, 1, 1], dim=3)
    q = q.reshape(B, S, nkv * G, D).transpose(1, 2)
    k = k.reshape(B, S, nkv, D).transpose(1, 2)
    v = v.reshape(B, S, nkv, D).transpose(1, 2)
    if bug:
        k = torch.cat([k[:, 1:], k[:, :1]], dim=1)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return {"out": out.transpose(1, 2).reshape(B, S, nkv * G * D)}


def shard(rank, world, inputs):
    return dict(inputs, wqkv=inputs["wqkv"].chunk(world, 0)[rank])


def case(world_size: int = 2, bug: bool = False) -> Case:
    g = torch.Generator().manual_seed(0)
    inputs = {"x": torch.randn(B, S, DIM, generator=g), "wqkv": torch.randn(NKV * (G + 2) * D, DIM, generator=g) / 4}
    return Case(single=attention, distributed=lambda rank, world: lambda x, wqkv: attention(x, wqkv, bug),
                inputs=inputs, dist_inputs=shard, world_size=world_size, expect={"out": "Shard(2)"},
                name="fused_qkv_gqa" + ("_bug" if bug else ""))
