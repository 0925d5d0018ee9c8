"""Shared pieces of the context-parallel zoo cases (not a case itself): softmax attention over
(batch, heads, seq, head_dim) tensors, and ring attention -- Q sharded by sequence, K/V passed
around the ring with isend/irecv, per-step partial attention merged by the online softmax
(running max m, running sum l, acc rescaled by exp(m_old - m_new), output acc / l).

Layouts: plain (rank r holds sequence chunk r of cp) or load-balanced causal (the sequence in
2*cp chunks, rank r holds chunks r and 2*cp-1-r, so every rank does the same causal work). Each
rank all_gathers its output block at the end and reassembles the whole sequence, so every
output is replicated. Bug switches (``bug=``) are the zoo's context-parallel bugs."""
import math

import torch
import torch.distributed as dist
from torch import nn

BATCH, HEADS, SEQ, HEAD_DIM = 1, 8, 16, 4


def qkv_inputs(seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {n: torch.randn(BATCH, HEADS, SEQ, HEAD_DIM, generator=g) for n in ("q", "k", "v")}


class Attention(nn.Module):
    """Single device: softmax(q k^T / sqrt(d) + causal mask) v over the whole sequence."""

    def __init__(self, causal: bool = False):
        super().__init__()
        self.causal = causal

    def forward(self, q, k, v):
        s = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(HEAD_DIM))
        if self.causal:
            pos = torch.arange(SEQ)
            s = s.masked_fill(pos[None, :] > pos[:, None], float("-inf"))
        return torch.softmax(s, dim=-1) @ v


def chunk_ids(rank: int, world: int, balanced: bool) -> list[int]:
    """The sequence chunks rank `rank` holds (chunks of SEQ / world, or of SEQ / (2 world) when balanced)."""
    return [rank, 2 * world - 1 - rank] if balanced else [rank]


class RingAttention(nn.Module):
    def __init__(self, rank: int, world: int, causal: bool = False, balanced: bool = False, bug: str = "",
                 lse_merge: bool = False):
        super().__init__()
        self.rank, self.world, self.causal, self.balanced, self.bug = rank, world, causal, balanced, bug
        self.lse_merge = lse_merge  # merge (out, lse) pairs, as torch's context_parallel does, not (acc, m, l)
        self.chunk = SEQ // (2 * world if balanced else world)

    def local(self, x, rank):
        parts = x.split(self.chunk, dim=2)
        return torch.cat([parts[c] for c in chunk_ids(rank, self.world, self.balanced)], dim=2)

    def positions(self, rank):
        return torch.cat([c * self.chunk + torch.arange(self.chunk) for c in chunk_ids(rank, self.world, self.balanced)])

    def exchange(self, k, v):
        """Send this rank's current K/V block to the next rank, receive the previous rank's."""
        nxt, prev = (self.rank + 1) % self.world, (self.rank - 1) % self.world
        if self.bug == "ring_direction":
            nxt, prev = prev, nxt  # BUG: the ring turns the other way, but forward() still counts owners downwards
        k2, v2 = torch.empty_like(k), torch.empty_like(v)
        ops = [dist.P2POp(dist.isend, k, nxt), dist.P2POp(dist.isend, v, nxt),
               dist.P2POp(dist.irecv, k2, prev), dist.P2POp(dist.irecv, v2, prev)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        return k2, v2

    def scores(self, q, k, q_pos, k_pos):
        s = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(HEAD_DIM))
        if self.causal:
            s = s.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
        return s

    def forward(self, q, k, v):
        q, k, v = self.local(q, self.rank), self.local(k, self.rank), self.local(v, self.rank)
        q_pos = self.positions(self.rank)
        if self.bug == "mask_offset" and self.rank == 1:
            q_pos = q_pos + 1  # BUG: this rank's causal mask is built one position late (each query sees the next key)
        if self.lse_merge:
            return self.gather(self.forward_lse(q, k, v, q_pos))
        # step 0: this rank's own block (never fully masked: the diagonal is kept)
        s = self.scores(q, k, q_pos, self.positions(self.rank))
        m = s.amax(dim=-1, keepdim=True)
        p = torch.exp(s - m)
        l = prev_l = p.sum(dim=-1, keepdim=True)
        acc = p @ v
        own = p, v
        owner = self.rank
        for _ in range(1, self.world):
            k, v = self.exchange(k, v)
            owner = (owner - 1) % self.world
            if self.causal and not self.balanced and owner > self.rank:
                continue  # every key of this block is after every query: fully masked, skipped
            s = self.scores(q, k, q_pos, self.positions(owner))
            if self.bug == "fixed_shift":  # not a bug: every block shifted by the own block's max (any finite bound works)
                p = torch.exp(s - m)
                l, acc = l + p.sum(dim=-1, keepdim=True), acc + p @ v
                continue
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            p = torch.exp(s - m_new)
            alpha = torch.exp(m - m_new)
            if self.bug == "no_rescale":
                alpha = torch.ones_like(alpha)  # BUG: the running sum and acc are not rescaled to the new max
            prev_l = l
            l = l * alpha + p.sum(dim=-1, keepdim=True)
            acc = acc * alpha + p @ v
            m = m_new
            own = own[0] * alpha, own[1]
        if self.bug == "block_twice":  # BUG: the own block's (rescaled) share is merged again at the end
            l, acc = l + own[0].sum(dim=-1, keepdim=True), acc + own[0] @ own[1]
        if self.bug == "stale_sum":
            return self.gather(acc / prev_l)  # BUG: divided by the running sum of the step before
        return self.gather(acc / l)

    def blocks(self, k, v):
        """(owner, k, v) of each ring step that is attended (fully masked blocks skipped)."""
        owner = self.rank
        yield owner, k, v
        for _ in range(1, self.world):
            k, v = self.exchange(k, v)
            owner = (owner - 1) % self.world
            if not (self.causal and not self.balanced and owner > self.rank):
                yield owner, k, v

    def forward_lse(self, q, k, v, q_pos):
        """Each step's normalized output and log-sum-exp, merged by logaddexp."""
        out = lse = None
        for owner, k, v in self.blocks(k, v):
            s = self.scores(q, k, q_pos, self.positions(owner))
            lse_j = torch.logsumexp(s, dim=-1, keepdim=True)
            out_j = torch.exp(s - lse_j) @ v
            if out is None:
                out, lse = out_j, lse_j
                continue
            if self.bug == "lse_add":
                new = lse + lse_j  # BUG: the log-sum-exps are added, not log-add-exp'ed
            else:
                new = torch.logaddexp(lse, lse_j)
            out = out * torch.exp(lse - new) + out_j * torch.exp(lse_j - new)
            lse = new
        return out

    def gather(self, out):
        blocks = [torch.empty_like(out) for _ in range(self.world)]
        dist.all_gather(blocks, out)
        chunks = {}
        for r, b in enumerate(blocks):
            for i, c in enumerate(chunk_ids(r, self.world, self.balanced)):
                chunks[c] = b[:, :, i * self.chunk:(i + 1) * self.chunk]
        return torch.cat([chunks[c] for c in sorted(chunks)], dim=2)
