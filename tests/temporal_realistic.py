"""Realistic programs for the two buffer hazards whose only programs in
tests/temporal_programs.py are minimal (tests/test_temporal_realistic.py): ``program(rank,
world, bug)`` run by every rank (fake process group for the checks, gloo for the twins' values).

* ``bucketed_dp_reduce`` -- DDP-style gradient buckets reduced with async all_reduce, flattened
  into ONE preallocated bucket buffer (the bug: the next bucket is copied into it while the
  previous bucket's reduction is still in flight: ``buffer-reused-before-completion``); the
  twin gives each bucket its own buffer (as DDP's per-bucket ``GradBucket`` buffers do).
* ``ring_kv_single_buffer`` -- ring attention's K/V exchange with one buffer: each step sends
  the rank's current block to the next rank and receives the previous rank's block INTO THE
  SAME tensor, both in flight at once (``concurrent-buffer-access``); the twin double-buffers
  (receives into a fresh tensor, then swaps), as ring-attention implementations do.
"""
import torch
import torch.distributed as dist


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
