"""Outputs proved only as partial sums across the ranks.

With no stated expectation, a dump's output only has to be *recoverable* from the ranks'
values, and a partial sum is recoverable -- by a reduction. The backward graph of a DDP or
Megatron step is partial before the gradient reduction that runs outside the graph (DDP's
bucket all-reduce, Megatron's finalize_model_grads), so such an output is legitimate there;
in a graph that should contain its reduction, it is the bug. Which one the user means is not
in the graph, so a partial output is never verified silently:

* named by the user (``--allow-partial-outputs NAME``, or all with no name; YAML
  ``partial_outputs: [NAME, ...]``): verified *up to a reduction the graph does not
  contain*, listed in ``report.partial_outputs``;
* otherwise: unknown, naming the outputs and the next step.

An output whose expectation is stated (``expect:``, ``--expect``) is judged by it alone.
"""
from __future__ import annotations

import fnmatch

from .result import Report

ALL = "*"


def partial_outputs(report: Report, expect: dict) -> list[str]:
    """The outputs the proof accepted only as a partial sum, with no stated expectation."""
    return [o.name for o in report.outputs
            if o.holds and o.holds.startswith("Partial(") and expect.get(o.name) is None]


def gate(report: Report, expect: dict, allowed) -> Report:
    """`report` with its partial outputs allowed (``report.partial_outputs``) or, where some
    are not allowed, a verified verdict turned unknown. `allowed`: names or globs (``*``: all)."""
    found = partial_outputs(report, expect)
    allowed = list(allowed or ())
    ok = [n for n in found if any(fnmatch.fnmatchcase(n, a) for a in allowed)]
    report.partial_outputs = ok
    left = [n for n in found if n not in ok]
    if not left or report.status != "verified":
        return report
    holds = {o.name: o.holds for o in report.outputs}
    shown = ", ".join(f"{n} ({holds[n]})" for n in left[:6]) + (f" and {len(left) - 6} more" if len(left) > 6 else "")
    report.status, report.strength = "unknown", None
    report.reason = (f"output(s) {shown} are only partial sums across the ranks: the reduction that completes them "
                     f"is not in the graph. Next step: if it runs outside the graph (a DDP or Megatron gradient reduction), say so "
                     f"with --allow-partial-outputs {' '.join(left[:3])} (YAML partial_outputs: [{', '.join(left[:3])}]) "
                     f"and the verdict is verified up to that reduction; if the graph should reduce them, the "
                     f"all-reduce is missing; or state each output's relation (expect:)")
    return report
