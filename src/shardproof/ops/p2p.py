"""Point-to-point ops (``shardproof_p2p``): a send's value is the tensor sent, a recv's the
tensor the paired send sent. The pairing is across ranks and in program order per
(source, destination, tag) channel: the engine's lockstep does it
(:func:`shardproof.engine.lockstep.run_lockstep`), never a local rule."""
from __future__ import annotations

from .registry import declare

P = "shardproof_p2p."
P2P_OPS = (P + "send", P + "recv")


def _recv_alone(*args, **kwargs):
    raise NotImplementedError("a recv's value is the paired send's (the lockstep pairs them across ranks)")


declare(P + "send", numerics=lambda x, peer, tag: x, rule=lambda ctx, x, peer, tag: x,
        doc="send to global rank peer on tag; its value is the tensor sent")
declare(P + "recv", numerics=_recv_alone, rule=_recv_alone,
        doc="recv from global rank peer on tag: the value the paired send sent (in order per channel)")


def is_p2p(op: str) -> bool:
    return op in P2P_OPS


declare("pippy._pipe_split", numerics=lambda *a, **k: None, rule=lambda ctx, *a, **k: None,
        doc="torch.distributed.pipelining's split marker (pipe_split(), SplitPoint): no value, no effect on the step")
