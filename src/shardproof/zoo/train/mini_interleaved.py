"""Megatron's interleaved 1F1B (``forward_backward_pipelining_with_interleaving``) on the
mini pipeline framework (zoo/train/mini_pipeline.py): each rank holds `chunks` model chunks,
virtual stage ``chunk * pp + stage`` running blocks ``[v * per, (v + 1) * per)`` of the
whole stack, so an activation goes round the ring of ranks `chunks` times. The order of a
rank's forward and backward passes is Megatron's: microbatches in groups of pp, the forward
of the k-th virtual microbatch on chunk ``(k // pp) % chunks``, the backward on chunk
``chunks - 1 - (k // pp) % chunks``, a warm-up of ``(pp - stage - 1) * 2 + (chunks - 1) * pp``
forwards, then one forward / one backward, then the cool-down backwards. Each activation and
gradient is an ``isend`` (waited at the end of the step) and an ``irecv`` waited on where it
is needed, with a tag naming its virtual stage, direction and microbatch.
"""
import torch
import torch.distributed as dist

from mini_pipeline import PipelineTraining, masked_sq_error
from shardproof.frontends.torch_p2p import pipeline_position
from shardproof.frontends.torch_train import split_microbatches


class InterleavedPipelineTraining(PipelineTraining):
    chunks = 2

    def stage_layers(self, vstage: int) -> list[int]:
        per = len(self.layers) // (self.mesh.pp * self.chunks)
        return list(range(vstage * per, (vstage + 1) * per))

    def owned_layers(self, stage: int) -> list[int]:
        return [i for c in range(self.chunks) for i in self.stage_layers(c * self.mesh.pp + stage)]

    def virtual(self, k: int, forward: bool) -> tuple[int, int]:
        """(virtual stage, microbatch) of this rank's k-th forward (or backward)."""
        pp = self.mesh.pp
        chunk = (k // pp) % self.chunks
        if not forward:
            chunk = self.chunks - 1 - chunk
        return chunk * pp + self.mesh.stage, (k // (pp * self.chunks)) * pp + k % pp

    def tag(self, vstage: int, forward: bool, mb: int) -> int:
        """The message into `vstage` (forward) or out of its successor (backward), for `mb`."""
        return (2 * vstage + (0 if forward else 1)) * len(self.microbatches) + mb

    def receive(self, src: int, tag: int, shape):
        buf = torch.empty(shape)
        dist.irecv(buf, src=src, tag=tag).wait()
        return buf

    def send(self, t, dst: int, tag: int):
        self.sends.append(dist.isend(t.contiguous(), dst=dst, tag=tag))

    def forward_pass(self, vstage: int, mb: int, shape, total_tokens):
        pp, last = self.mesh.pp, self.mesh.pp * self.chunks - 1
        if vstage == 0:
            x = self.microbatches[mb]["x"]
        else:
            x = self.receive(self.mesh.rank_of((vstage - 1) % pp), self.tag(vstage, True, mb), shape).requires_grad_(True)
        out = x
        for i in self.stage_layers(vstage):
            out = self.layers[i](out)
        if vstage == last:
            out = masked_sq_error(out, self.microbatches[mb]) / total_tokens
            self.losses.append(out.detach())
        else:
            self.send(out.detach(), self.mesh.rank_of((vstage + 1) % pp), self.tag(vstage + 1, True, mb))
        self.saved[(vstage, mb)] = (x, out)

    def backward_pass(self, vstage: int, mb: int, shape, params):
        pp, last = self.mesh.pp, self.mesh.pp * self.chunks - 1
        x, out = self.saved.pop((vstage, mb))
        grad = None if vstage == last else self.receive(self.mesh.rank_of((vstage + 1) % pp),
                                                         self.tag(vstage, False, mb), shape)
        mine = {n: p for n, p in params.items() if int(n.split(".")[1]) in self.stage_layers(vstage)}
        wrt = list(mine.values()) + ([x] if vstage > 0 else [])
        got = torch.autograd.grad(out, wrt, grad_outputs=grad, allow_unused=True)
        self.grads = {**self.grads, **self.accumulate(self.grads, dict(zip(mine, got[:len(mine)])))}
        if vstage > 0:
            self.send(got[-1], self.mesh.rank_of((vstage - 1) % pp), self.tag(vstage - 1, False, mb))

    def run_schedule(self, params, inputs, train):
        self.microbatches = split_microbatches(inputs, train.microbatches)
        self.saved, self.grads, self.losses, self.sends = {}, {}, [], []
        total_tokens = self.all_reduce_tokens(inputs)
        shape, pp = tuple(self.microbatches[0]["x"].shape), self.mesh.pp
        total = len(self.microbatches) * self.chunks
        warmup = min((pp - self.mesh.stage - 1) * 2 + (self.chunks - 1) * pp, total)
        order = [(True, k) for k in range(warmup)]
        for k in range(total - warmup):
            order += [(True, warmup + k), (False, k)]
        order += [(False, k) for k in range(total - warmup, total)]
        for forward, k in order:
            vstage, mb = self.virtual(k, forward)
            with pipeline_position(vstage, mb):
                if forward:
                    self.forward_pass(vstage, mb, shape, total_tokens)
                else:
                    self.backward_pass(vstage, mb, shape, params)
        for work in self.sends:
            work.wait()
        loss = sum(self.losses) if self.mesh.stage == pp - 1 else torch.zeros(())
        return loss, self.reduce_gradients(self.grads)
