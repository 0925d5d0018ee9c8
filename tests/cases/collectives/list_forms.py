"""The list-form and rooted collectives of issue 15 ("fail at capture: could not find a token
for effect"), each in a small program at world size 2 with a buggy twin. Labels are checked
on a real gloo group by tests/test_list_collectives.py.

Inputs: ``b`` [4, 8] split along dim 1 and ``w`` [8, 6] along dim 0 (so ``h = b @ w`` is a
partial sum), ``a`` [8, 4] split along dim 0, ``x`` [4, 6] replicated."""
import torch
import torch.distributed as dist

from shardproof import Case


def _reduce_scatter(a, b, w, x, bug=False):
    h = b @ w
    pieces = list(h.chunk(dist.get_world_size(), 0))
    out = torch.empty_like(pieces[0])
    dist.reduce_scatter(out, pieces[::-1] if bug else pieces)  # BUG (bug): the list reversed
    return out


def _all_to_all(a, b, w, x, bug=False):
    world = dist.get_world_size()
    ins = [p.contiguous() for p in a.chunk(world, 1)]
    outs = [torch.empty_like(p) for p in ins]
    dist.all_to_all(outs, ins[::-1] if bug else ins)  # BUG (bug): the send list reversed
    return torch.cat(outs, 0)


def _reduce(a, b, w, x, bug=False):
    h = b @ w
    if not bug:  # BUG (bug): no reduce, rank 0 broadcasts its own partial sum
        dist.reduce(h, dst=0)
    dist.broadcast(h, src=0)
    return h


def _scatter(a, b, w, x, bug=False):
    world = dist.get_world_size()
    out = torch.empty(x.shape[0] // world, x.shape[1])
    pieces = [p.contiguous() for p in x.chunk(world, 0)]
    dist.scatter(out, (pieces[::-1] if bug else pieces) if dist.get_rank() == 0 else None, src=0)  # BUG (bug)
    return out


def _send_recv(a, b, w, x, bug=False):
    rank = dist.get_rank()
    theirs = torch.empty_like(a)
    if rank == 0:
        dist.send(a.contiguous(), dst=1)
        dist.recv(theirs, src=1)
    else:
        dist.recv(theirs, src=0)
        dist.send(a.contiguous(), dst=0)
    first = bug or rank == 0  # BUG (bug): every rank puts its own rows first
    return torch.cat([a, theirs] if first else [theirs, a], 0)


# form -> (the program, the single-device program, the output's relation, the text of the
# source line where the buggy twin's finding must be)
FORMS = {"reduce_scatter": (_reduce_scatter, lambda a, b, w, x: b @ w, "Shard(0)", "dist.reduce_scatter("),
         "all_to_all": (_all_to_all, lambda a, b, w, x: a, "Shard(1)", "torch.cat(outs, 0)"),
         "reduce": (_reduce, lambda a, b, w, x: b @ w, "Replicate()", "dist.broadcast(h, src=0)"),
         "scatter": (_scatter, lambda a, b, w, x: x, "Shard(0)", "dist.scatter("),
         "send_recv": (_send_recv, lambda a, b, w, x: a, "Replicate()", "torch.cat([a, theirs]")}
VARIANTS = [f"{form}{suffix}" for form in FORMS for suffix in ("", "_bug")]


def _shard(rank, world, inputs):
    return {"a": inputs["a"].chunk(world, 0)[rank], "b": inputs["b"].chunk(world, 1)[rank],
            "w": inputs["w"].chunk(world, 0)[rank], "x": inputs["x"]}


def build(world_size: int, variant: str) -> Case:
    form, bug = variant.removesuffix("_bug"), variant.endswith("_bug")
    program, single, expect, _ = FORMS[form]
    g = torch.Generator().manual_seed(0)
    inputs = {"a": torch.randn(8, 4, generator=g), "b": torch.randn(4, 8, generator=g),
              "w": torch.randn(8, 6, generator=g), "x": torch.randn(4, 6, generator=g)}
    return Case(single=single, distributed=lambda rank, world: lambda **kw: program(**kw, bug=bug), inputs=inputs,
                dist_inputs=_shard, world_size=world_size, name=f"list_{variant}", expect={"out": expect},
                meta={"buggy": bug})


def case(world_size: int = 2, variant: str = "reduce_scatter") -> Case:
    return build(world_size, variant)
