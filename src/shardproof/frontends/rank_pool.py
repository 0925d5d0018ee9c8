"""Ranks captured in parallel worker processes (issue 16): each rank's trace is independent
(its own fake process group, its own program), so ``workers`` processes trace them at
once and send the graphs back; the result is the serial capture's, rank by rank.

The workers are forked (``concurrent.futures.ProcessPoolExecutor`` over the ``fork``
context): a case's programs are closures over the user's objects, which a spawned process
could not receive; where fork is not available, and with one worker, ranks are captured in
this process. A rank's capture error is reported as in a serial capture, with the user's
line (found in the worker, where the traceback is)."""
from __future__ import annotations

import multiprocessing
import os
import traceback
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable

from .user_frame import user_location

_TASK: list = []  # the function the forked workers run (set before the fork)
CAPTURE_WORKERS = 1
"""Processes the ranks are captured on when the caller does not say (``workers=None``);
0: min(ranks, CPUs). One by default: on this project's 2-core machine the forked workers
do not pay (bench/README.md)."""


class RankCaptureError(Exception):
    """A worker's capture failed; the message carries the user's line already."""


def default_workers(world: int) -> int:
    """min(ranks, CPUs this process may use)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(world, cpus))


def _run(rank: int):
    import torch
    torch.set_num_threads(1)
    from .torch_capture import CaptureError
    try:
        return "ok", _TASK[0](rank)
    except CaptureError as exc:
        return "capture", str(exc) + user_location(exc)
    except Exception as exc:  # noqa: BLE001  (re-raised in the parent with the worker's traceback)
        return "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-8)}"


def map_ranks(capture: Callable[[int], Any], world: int, workers: int | None = None,
              progress: Callable[[int], None] | None = None) -> list:
    """``[capture(rank) for rank in range(world)]``, on `workers` forked processes (default
    :func:`default_workers`); `progress(rank)` before each rank is submitted."""
    workers = default_workers(world) if workers is None else max(1, workers)
    if workers == 1 or world == 1 or "fork" not in multiprocessing.get_all_start_methods():
        out = []
        for rank in range(world):
            if progress:
                progress(rank)
            out.append(capture(rank))
        return out
    from .torch_capture import CaptureError
    _TASK[:] = [capture]
    try:
        with ProcessPoolExecutor(max_workers=min(workers, world),
                                 mp_context=multiprocessing.get_context("fork")) as pool:
            futures = []
            for rank in range(world):
                if progress:
                    progress(rank)
                futures.append(pool.submit(_run, rank))
            results = [f.result() for f in futures]
    finally:
        _TASK.clear()
    for status, payload in results:
        if status == "capture":
            raise CaptureError(payload)
        if status == "error":
            raise RankCaptureError(payload)
    return [payload for _, payload in results]


def capture_ranks(capture_rank: Callable[[int], tuple], world: int, workers: int | None = None,
                  progress: Callable[[int], None] | None = None) -> tuple[list, list]:
    """(graphs, input values) of every rank, `capture_rank(rank)` giving each pair, on
    `workers` processes (None: :data:`CAPTURE_WORKERS`; 0: :func:`default_workers`)."""
    workers = CAPTURE_WORKERS if workers is None else workers
    results = map_ranks(capture_rank, world, workers or None, progress)
    return [g for g, _ in results], [v for _, v in results]
