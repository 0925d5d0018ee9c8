"""Ranks captured in parallel (issue 16): each rank's trace is independent (its own fake
process group, its own program), so the executor (:mod:`shardproof.engine.executor`:
this process, a pool of forked processes, or Ray) traces them at once and sends the
graphs back; the result is the serial capture's, rank by rank. A rank's capture error is
reported as in a serial capture, with the user's line (found in the worker, where the
traceback is)."""
from __future__ import annotations

import traceback
from typing import Any, Callable

from ..engine import executor as ex
from .user_frame import user_location

CAPTURE_WORKERS = 1
"""Processes the ranks are captured on when neither the caller nor the run's executor
(:func:`~shardproof.engine.executor.active`) says; 0: one per CPU. One by default: on this
project's 2-core machine the forked workers do not pay (bench/README.md)."""


class RankCaptureError(Exception):
    """A worker's capture failed; the message carries the user's line already."""


def default_workers(world: int) -> int:
    """min(ranks, CPUs this process may use)."""
    return max(1, min(world, ex.cpus()))


class _Guarded:
    """`capture(rank)` as a value: ("ok", result), or the failure as text (a worker's
    exception may not travel back; its traceback, with the user's line, is here)."""

    def __init__(self, capture: Callable[[int], Any]):
        self.capture = capture

    def __call__(self, rank: int):
        import torch
        torch.set_num_threads(1)
        from .torch_capture import CaptureError
        try:
            return "ok", self.capture(rank)
        except CaptureError as exc:
            return "capture", str(exc) + user_location(exc)
        except Exception as exc:  # noqa: BLE001  (re-raised in the parent with the worker's traceback)
            return "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-8)}"


def map_ranks(capture: Callable[[int], Any], world: int, workers: int | None = None,
              progress: Callable[[int], None] | None = None, executor: ex.Executor | None = None,
              labels: list | None = None) -> list:
    """``[capture(rank) for rank in range(world)]`` on `executor` (default: a local pool
    of `workers` forked processes, None: :func:`default_workers`); `progress(rank)` before
    each rank is submitted. `labels`: the units' names (default ``rank R``)."""
    labels = labels or [f"rank {r}" for r in range(world)]
    if executor is None:
        executor = ex.LocalExecutor(default_workers(world) if workers is None else max(1, workers))
    if executor.kind != "ray" and (executor.workers == 1 or world == 1):  # in this process: errors as raised
        return executor.map(capture, range(world), "capture", labels, progress)
    from .torch_capture import CaptureError
    results = executor.map(_Guarded(capture), range(world), "capture", labels, progress)
    for status, payload in results:
        if status == "capture":
            raise CaptureError(payload)
        if status == "error":
            raise RankCaptureError(payload)
    return [payload for _, payload in results]


def _resolve(workers: int | None, executor: ex.Executor | None) -> tuple:
    """(workers, executor) as given, else the run's executor, else :data:`CAPTURE_WORKERS`."""
    if executor is None and workers is None:
        executor = ex.active()
    if executor is None:
        workers = CAPTURE_WORKERS if workers is None else workers
    return workers or None, executor


def capture_classes(capture_class: Callable[[int], tuple], classes: list, workers: int | None = None,
                    progress: Callable[[int], None] | None = None, executor: ex.Executor | None = None) -> list:
    """``capture_class(i)`` for each rank class (frontends/rank_classes.py), one unit each,
    named after its representative, on the executor :func:`capture_ranks` would use;
    `progress(representative)` before each is submitted."""
    workers, executor = _resolve(workers, executor)
    labels = [f"rank {c[0]}" + (f" (class of {len(c)} ranks)" if len(c) > 1 else "") for c in classes]
    return map_ranks(capture_class, len(classes), workers, progress and (lambda i: progress(classes[i][0])),
                     executor, labels)


def capture_ranks(capture_rank: Callable[[int], tuple], world: int, workers: int | None = None,
                  progress: Callable[[int], None] | None = None,
                  executor: ex.Executor | None = None) -> tuple[list, list]:
    """(graphs, input values) of every rank, `capture_rank(rank)` giving each pair, on
    `executor`, else on `workers` local processes (None: the run's executor, else
    :data:`CAPTURE_WORKERS`; 0: :func:`default_workers`)."""
    workers, executor = _resolve(workers, executor)
    results = map_ranks(capture_rank, world, workers, progress, executor)
    return [g for g, _ in results], [v for _, v in results]
