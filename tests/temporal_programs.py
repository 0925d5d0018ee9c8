"""Programs for the temporal checks (tests/test_temporal.py): ``program(rank, world)`` run
by every rank of a process group (fake for the checks, gloo for labels), each bug beside
its correct twin. Labels: the deadlocks hang on gloo (a timeout), their twins finish; the
buffer races are races by c10d semantics (an async op's buffers belong to it until its
``wait()`` returns), their twins finish on gloo with the single-device values."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

# ---------------------------------------------------------------- minimal


def use_before_wait(rank, world, bug=True):
    x = torch.full((8,), float(rank + 1))
    work = dist.all_reduce(x, async_op=True)
    if bug:
        y = x * 2  # reads x before the reduction is known to be done
        work.wait()
    else:
        work.wait()
        y = x * 2
    return {"y": y}


def send_buffer_reused(rank, world, bug=True):
    x = torch.full((4,), float(rank + 1))
    peer = 1 - rank
    if rank == 0:
        work = dist.isend(x, peer)
        if bug:
            x.add_(10)  # overwrites the send buffer while the send may still read it
            work.wait()
        else:
            work.wait()
            x.add_(10)
        return {"x": x}
    dist.recv(x, peer)
    return {"x": x}


def two_ops_one_buffer(rank, world, bug=True):
    x = torch.full((4,), float(rank + 1))
    y = x if bug else x.clone()
    w1 = dist.all_reduce(x, async_op=True)
    w2 = dist.all_reduce(y, async_op=True)  # bug: a second reduction of the same buffer in flight
    w1.wait()
    w2.wait()
    return {"x": x, "y": y}


def collective_order(rank, world, bug=True):
    x = torch.full((4,), float(rank + 1))
    out = torch.empty(4 * world)
    if bug and rank == 1:
        dist.all_gather_into_tensor(out, x)
        dist.all_reduce(x)
    else:
        dist.all_reduce(x)
        dist.all_gather_into_tensor(out, x)
    return {"x": x, "out": out}


def _exchange(rank, bug, first):
    """Rank 0 sends then receives, rank 1 receives then sends; the bug has both ranks do
    `first` first. Blocking sends rendezvous with their receive (gloo and NCCL alike)."""
    x = torch.full((4,), float(rank + 1))
    got = torch.empty(4)
    peer = 1 - rank
    sends_first = first == "send" if bug else rank == 0
    for op in ("send", "recv") if sends_first else ("recv", "send"):
        if op == "send":
            dist.send(x, peer)
        else:
            dist.recv(got, peer)
    return {"got": got}


def recv_first(rank, world, bug=True):
    return _exchange(rank, bug, "recv")


def send_first(rank, world, bug=True):
    return _exchange(rank, bug, "send")


# ---------------------------------------------------------------- realistic


def zero3_prefetch(rank, world, bug=True, layers=3, dim=4):
    """ZeRO-3 style: each layer's weight is sharded over the ranks and all-gathered just in
    time; the next layer's gather is issued (async) before this layer computes. With one
    gather buffer the prefetch overwrites the weight this layer is reading."""
    torch.manual_seed(0)
    full = [torch.randn(dim, dim) for _ in range(layers)]
    shards = [w.chunk(world)[rank].contiguous() for w in full]
    buffers = [torch.empty(dim, dim)] if bug else [torch.empty(dim, dim), torch.empty(dim, dim)]
    h = torch.ones(2, dim)
    work = dist.all_gather_into_tensor(buffers[0], shards[0], async_op=True)
    for i in range(layers):
        work.wait()
        weight = buffers[i % len(buffers)]
        if i + 1 < layers:  # prefetch the next layer's weight
            work = dist.all_gather_into_tensor(buffers[(i + 1) % len(buffers)], shards[i + 1], async_op=True)
        h = torch.tanh(F.linear(h, weight))
    return {"h": h}


def overlapped_dp_step(rank, world, bug=True, lr=0.1):
    """Data parallel: each gradient's all_reduce is issued (async) as soon as it exists and
    overlaps the rest of the step; the update must wait for the reductions."""
    torch.manual_seed(0)
    w1, w2 = torch.randn(8, 4, requires_grad=True), torch.randn(2, 8, requires_grad=True)
    x = torch.randn(4, 4).chunk(world)[rank]
    loss = F.linear(torch.relu(F.linear(x, w1)), w2).pow(2).sum()
    loss.backward()
    works = [dist.all_reduce(p.grad, async_op=True) for p in (w2, w1)]
    with torch.no_grad():
        if not bug:
            for work in works:
                work.wait()
        new = {n: p - lr * p.grad for n, p in (("w1", w1), ("w2", w2))}  # bug: reads grads still being reduced
    for work in works if bug else []:
        work.wait()
    return new


def groups_in_rank_order(rank, world, bug=True):
    """Two gradient buckets reduced on their own process groups (as Megatron's embedding and
    data-parallel groups); the bug iterates the buckets in a rank-dependent order."""
    groups = {"embedding": dist.new_group(list(range(world))), "layers": dist.new_group(list(range(world)))}
    grads = {name: torch.full((4,), float(rank + 1)) for name in groups}
    names = sorted(groups, reverse=bug and rank % 2 == 1)
    for name in names:
        dist.all_reduce(grads[name], group=groups[name])
    return grads


# DDP-style buckets flattened into ONE preallocated buffer: the next bucket is copied in while the
# previous one's all_reduce is still in flight (the twin: a buffer per bucket, as DDP's GradBuckets).
def bucketed_dp_reduce(rank, world, bug=True, buckets=3, size=4):
    torch.manual_seed(0)
    grads = [torch.randn(size) * (rank + 1) for _ in range(buckets)]  # this rank's gradient per bucket
    shared = torch.empty(size)
    pending = []
    for grad in grads:
        flat = shared if bug else torch.empty(size)
        flat.copy_(grad)  # bug: overwrites the bucket an earlier all_reduce is still reducing
        pending.append((flat, dist.all_reduce(flat, async_op=True)))
    out = {}
    for i, (flat, work) in enumerate(pending):
        work.wait()
        out[f"g{i}"] = flat / world
    return out


# Ring attention's K/V exchange through one tensor: the current block sent to the next rank and the
# previous rank's block received INTO IT, both in flight (the twin double-buffers, then swaps).
def ring_kv_single_buffer(rank, world, bug=True, steps=None, size=4):
    kv = torch.full((size,), float(rank))
    seen = [kv.clone()]
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    for _ in range((world - 1) if steps is None else steps):
        into = kv if bug else torch.empty_like(kv)
        ops = [dist.P2POp(dist.isend, kv, nxt), dist.P2POp(dist.irecv, into, prv)]  # bug: one tensor both ways
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        kv = into
        seen.append(kv.clone())
    return {"blocks": torch.stack(seen)}


def _stage(rank, x, w):
    return torch.tanh(F.linear(x, w))


def pipeline_1f1b(rank, world, bug=False, microbatches=4, dim=4):
    """A 2-stage pipeline, Megatron's 1F1B schedule: stage 0 runs one warm-up forward,
    then pairs each forward's send with the previous backward's receive (batch_isend_irecv),
    then the cool-down backward; stage 1 receives, computes and sends the gradient back.
    The bug blocks on a receive first on both stages (stage 0 waits for a gradient before
    sending the activation stage 1 needs to produce it)."""
    torch.manual_seed(0)
    w = torch.randn(dim, dim)
    peer = 1 - rank
    out = torch.zeros(dim)
    if rank == 0:
        acts = [torch.randn(dim) * (m + 1) for m in range(microbatches)]
        if bug:
            for m in range(microbatches):
                grad = torch.empty(dim)
                dist.recv(grad, peer)  # waits for a gradient of a forward not sent yet
                dist.send(_stage(0, acts[m], w), peer)
                out += grad
            return {"out": out}
        dist.send(_stage(0, acts[0], w), peer)  # warm-up
        for m in range(1, microbatches):  # steady state: send forward m, receive backward m-1
            grad = torch.empty(dim)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, _stage(0, acts[m], w), peer),
                                           dist.P2POp(dist.irecv, grad, peer)])
            for r in reqs:
                r.wait()
            out += grad
        grad = torch.empty(dim)  # cool-down
        dist.recv(grad, peer)
        return {"out": out + grad}
    for m in range(microbatches):
        act = torch.empty(dim)
        dist.recv(act, peer)
        dist.send(_stage(1, act, w), peer)  # the "gradient"
        out += act
    return {"out": out}
