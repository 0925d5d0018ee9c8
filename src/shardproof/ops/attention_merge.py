"""Ring / flash attention merges: ``aten.logaddexp`` (kept whole at capture, so the
log-sum-exp merge is one node) and the online-softmax normal form
(:mod:`shardproof.algebra.online_softmax`) applied to the values of the ops that build
the merge: rescaling products, sums of partial results, the final division, logaddexp,
and the batched matmul (and its views) of a block."""
from __future__ import annotations

import numpy as np

from ..algebra.layout import Val
from ..algebra.online_softmax import normal_form
from ..algebra.softmax_rows import masked_scores
from .common import elementwise_op
from .registry import post_rule

T = "aten."

elementwise_op(T + "logaddexp", np.logaddexp, commutative=True, doc="log(exp(a) + exp(b))")


@post_rule(*(T + n for n in ("mul", "add", "div", "logaddexp", "bmm", "matmul", "view", "_unsafe_view", "reshape")))
def _online_softmax(ctx, out, args, kwargs):
    return normal_form(ctx.terms, out)


@post_rule(T + "masked_fill")
def _block_mask(ctx, out, args, kwargs):
    """Scores masked by a constant mask: the masked scores of the term whose mask holds the
    same values at these positions (a block mask built for other key positions that happens
    to agree), so a block attended with a mask of equal values is that block's scores."""
    if len(args) < 3 or not (isinstance(args[0], Val) and isinstance(args[1], Val)) or args[2] != float("-inf"):
        return out
    if isinstance(out, Val) and ctx.terms[out.t].op == "where" and ctx.terms[out.t].children[1:] == (args[0].t,):
        return out  # already the masked scores of x
    found = masked_scores(ctx.terms, args[0], args[1])
    return out if found is None else found
