"""Programs for the collective soundness tests (issue 14, classes 2, 3 and 8): each rank
holds one block of ``x`` (rows ``BLOCK*r : BLOCK*(r+1)``), runs a step on it (collectives
inside a subgroup) and returns its new block: the output is ``Shard(0)`` of the result
the single-device program computes from the whole ``x``.
The case files in this folder pick one step each (``case(world_size)``)."""
import torch
import torch.distributed as dist

from shardproof import Case

BLOCK, WIDTH = 2, 3


def _blocks(x, world):
    return list(x.chunk(world, 0))


def make_case(world, step, expected, name, meta=None, group=None, block=BLOCK):
    """`step(rank, g, members, t) -> the rank's new block`; `expected(blocks, members) -> the
    new blocks` (single device); `group`: the subgroup's global ranks (default: all)."""
    torch.manual_seed(0)
    members = list(group or range(world))
    x = torch.randn(world * block, WIDTH, dtype=torch.float64)

    def single(x):
        return torch.cat(expected(_blocks(x, world), members), 0)

    def distributed(rank, world_size):
        g = dist.new_group(members)

        def program(x):
            return step(rank, g, members, x) if rank in members else x.clone()
        return program

    return Case(single=single, distributed=distributed, inputs={"x": x}, world_size=world, name=name,
                dist_inputs=lambda rank, w, inputs: {"x": _blocks(inputs["x"], w)[rank]}, meta=meta or {},
                expect={"out": "Shard(0)"})


def replace_members(blocks, members, value_of):
    """The blocks with member m's replaced by value_of(k, m) (k its group rank)."""
    out = list(blocks)
    for k, m in enumerate(members):
        out[m] = value_of(k, m)
    return out


# ---------------------------------------------------------------- steps (class 2: rooted collectives)

def broadcast_step(root=None, group_root=None):
    def step(rank, g, members, t):
        got = t.clone()
        dist.broadcast(got, src=root, group=g, group_src=group_root)
        return t + got
    return step


def broadcast_expected(owner):
    return lambda blocks, members: replace_members(blocks, members, lambda k, m: blocks[m] + blocks[owner])


def reduce_step(dst=None, group_dst=None, send_from=None):
    """reduce to the root, then broadcast the root's buffer (from `send_from`, a global rank;
    None: every member reads its own buffer, the sum only on the root)."""
    def step(rank, g, members, t):
        got = t.clone()
        dist.reduce(got, dst=dst, group=g, group_dst=group_dst)
        if send_from is not None:
            dist.broadcast(got, src=send_from, group=g)
        return t + got
    return step


def sum_of_members(blocks, members):
    """Each member's block plus the sum of the members' blocks."""
    total = sum(blocks[m] for m in members)
    return replace_members(blocks, members, lambda k, m: blocks[m] + total)


def scatter_step(root=None, group_root=None):
    """The root's block cut into one row per member; each member adds its row to its block."""
    owner = root if root is not None else None

    def step(rank, g, members, t):
        me = owner if owner is not None else members[group_root]
        pieces = list(t.chunk(len(members), 0)) if rank == me else None
        row = torch.empty(t.shape[0] // len(members), t.shape[1], dtype=t.dtype)
        dist.scatter(row, pieces, src=root, group=g, group_src=group_root)
        return t + row.repeat(len(members), 1)
    return step


def scatter_expected(owner):
    def expected(blocks, members):
        rows = blocks[owner].chunk(len(members), 0)
        return replace_members(blocks, members, lambda k, m: blocks[m] + rows[k].repeat(len(members), 1))
    return expected


def gather_step(dst=None, group_dst=None, send_from=None):
    """gather to the root, which sums the list; broadcast from `send_from` (global)."""
    def step(rank, g, members, t):
        me = dst if dst is not None else members[group_dst]
        bufs = [torch.empty_like(t) for _ in members] if rank == me else None
        dist.gather(t, bufs, dst=dst, group=g, group_dst=group_dst)
        s = torch.stack(bufs).sum(0) if rank == me else torch.zeros_like(t)
        dist.broadcast(s, src=send_from, group=g)
        return t + s
    return step


# ---------------------------------------------------------------- list forms

def all_gather_list_step(swap=False):
    def step(rank, g, members, t):
        bufs = [torch.empty_like(t) for _ in members]
        dist.all_gather(bufs, t, group=g)
        return t + ((bufs[1] - bufs[0]) if swap else (bufs[0] - bufs[1]))
    return step


def all_gather_list_expected(blocks, members):
    return replace_members(blocks, members, lambda k, m: blocks[m] + (blocks[members[0]] - blocks[members[1]]))


def reduce_scatter_list_step(swap=False):
    def step(rank, g, members, t):
        inputs = [t * (k + 1) for k in range(len(members))]
        out = torch.empty_like(t)
        dist.reduce_scatter(out, inputs[::-1] if swap else inputs, group=g)
        return out
    return step


def reduce_scatter_list_expected(blocks, members):
    total = sum(blocks[m] for m in members)
    return replace_members(blocks, members, lambda k, m: total * (k + 1))


def all_to_all_list_step(swap=False):
    def step(rank, g, members, t):
        inputs = list(t.chunk(len(members), 0))
        outs = [torch.empty_like(p) for p in inputs]
        dist.all_to_all(outs, inputs, group=g)
        return torch.cat(outs[::-1] if swap else outs, 0)
    return step


def all_to_all_expected(blocks, members):
    n = len(members)
    return replace_members(blocks, members, lambda k, m: torch.cat([blocks[j].chunk(n, 0)[k] for j in members], 0))


# ---------------------------------------------------------------- class 3: buffers of all_to_all_single

def a2a_single_step(out_buffer="contiguous", in_buffer="contiguous"):
    """all_to_all_single of the block (one row per member) into a buffer laid out as named."""
    def step(rank, g, members, t):
        n, w = t.shape
        if out_buffer == "transposed":
            out = torch.empty_like(t.t().contiguous().t())  # empty_like keeps the view's strides (1, n)
        elif out_buffer == "offset":
            out = torch.empty(n + 1, w, dtype=t.dtype)[1:]  # contiguous, storage offset w
        else:
            out = torch.empty_like(t)
        inp = t.t().contiguous().t() if in_buffer == "transposed" else t
        dist.all_to_all_single(out, inp, group=g)
        return out.clone()
    return step


# ---------------------------------------------------------------- class 8: per-rank split sizes

def a2a_splits_step(send, receive_fix=None):
    """Member k sends send[k][j] rows of its block to member j; receives send[j][k] from j
    (or what `receive_fix(k, splits)` says). Each member returns its received rows summed
    into one row, padded to a block."""
    def step(rank, g, members, t):
        k = members.index(rank)
        ins = send[k]
        outs = [send[j][k] for j in range(len(members))]
        if receive_fix is not None:
            outs = receive_fix(k, outs)
        out = torch.empty(sum(outs), t.shape[1], dtype=t.dtype)
        dist.all_to_all_single(out, t[:sum(ins)].contiguous(), outs, ins, group=g)
        return torch.cat([out.sum(0, keepdim=True), t[1:]], 0)
    return step


def a2a_splits_expected(send):
    def expected(blocks, members):
        def received(k, m):
            rows = []
            for j, src in enumerate(members):
                at = sum(send[j][:k])
                rows.append(blocks[src][at:at + send[j][k]])
            return torch.cat([torch.cat(rows, 0).sum(0, keepdim=True), blocks[m][1:]], 0)
        return replace_members(blocks, members, received)
    return expected
