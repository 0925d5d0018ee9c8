"""Ring / flash attention merges: ``aten.logaddexp`` (kept whole at capture, so the
log-sum-exp merge is one node) and the online-softmax normal form
(:mod:`shardproof.algebra.online_softmax`) applied to the values of the ops that build
the merge: rescaling products, sums of partial results, the final division, logaddexp,
and the batched matmul (and its views) of a block."""
from __future__ import annotations

import numpy as np

from ..algebra.online_softmax import normal_form
from .common import elementwise_op
from .registry import post_rule

T = "aten."

elementwise_op(T + "logaddexp", np.logaddexp, commutative=True, doc="log(exp(a) + exp(b))")


@post_rule(*(T + n for n in ("mul", "add", "div", "logaddexp", "bmm", "matmul", "view", "_unsafe_view", "reshape")))
def _online_softmax(ctx, out):
    return normal_form(ctx.terms, out)
