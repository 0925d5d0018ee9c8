"""A run's time and memory budget (``--timeout``, ``--max-memory``): a deadline and a
peak-RSS bound checked between stages and between the nodes of the interpreter loop.
A run over budget stops with :class:`BudgetExceeded` naming the stage (and node) where it
stopped; the caller turns it into the verdict unknown. No budget set: checks cost nothing."""
from __future__ import annotations

import resource
import sys
import time
from contextlib import contextmanager


class BudgetExceeded(BaseException):
    """The run went over its budget. A BaseException, so that no rule's ``except
    Exception`` (which turns a failing rule into an unsupported op) swallows it."""


_state: dict = {"deadline": None, "seconds": None, "max_bytes": None, "stage": "starting"}


def peak_rss() -> int:
    """This process's peak resident set size in bytes."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


@contextmanager
def budget(seconds: float | None = None, max_bytes: int | None = None):
    """Checks inside the block stop the run after `seconds` or above `max_bytes` peak RSS."""
    saved = dict(_state)
    _state.update(deadline=None if seconds is None else time.monotonic() + seconds, seconds=seconds,
                  max_bytes=max_bytes, stage="starting")
    try:
        yield
    finally:
        _state.clear()
        _state.update(saved)


def memory_limit() -> int | None:
    """The ``--max-memory`` bound in bytes (None: none set)."""
    return _state["max_bytes"]


def stage(name: str) -> None:
    """A new stage of the run begins (and the budget is checked)."""
    _state["stage"] = name
    check()


def check(node=None, rank: int | None = None) -> None:
    """Raise :class:`BudgetExceeded` when the run is over budget; `node` (of `rank`, None:
    the single-device program) is where the interpreter is."""
    if _state["deadline"] is None and _state["max_bytes"] is None:
        return
    over = None
    if _state["deadline"] is not None and time.monotonic() > _state["deadline"]:
        over = f"the time budget ({_state['seconds']:g} s, --timeout) ran out"
    elif _state["max_bytes"] is not None and peak_rss() > _state["max_bytes"]:
        over = (f"the memory budget ({_state['max_bytes'] / 2**20:.0f} MiB, --max-memory) was exceeded "
                f"(peak RSS {peak_rss() / 2**20:.0f} MiB)")
    if over is None:
        return
    where = f"while {_state['stage']}"
    if node is not None:
        where += (f", at node {node.name} ({node.op}) of "
                  + ("the single-device program" if rank is None else f"rank {rank}"))
    raise BudgetExceeded(f"{over} {where}")
