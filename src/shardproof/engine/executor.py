"""Where independent units of work run (issue 16): in this process (``serial``), on a local
pool of forked processes (``local``, :mod:`concurrent.futures`), or on a Ray cluster
(``ray``: an address, or a Ray instance started here on loopback).

An executor maps a function over items and gives the results in the items' order, each
with the worker that computed it and its seconds (:class:`Unit`); the results do not
depend on the executor. The function is any callable: the local pool forks after it is
set (a case's programs are closures over the user's objects, which a spawned process could
not receive); Ray receives it by value (``cloudpickle``), the user's own modules (a case
file's siblings) with it, so a worker needs only shardproof and torch installed.

A unit's exception is the caller's to shape: a function that may fail in a worker should
return its failure as a value (see ``frontends/rank_pool.py``)."""
from __future__ import annotations

import multiprocessing
import os
import socket
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

KINDS = ("serial", "local", "ray")


class ExecutorError(Exception):
    """The executor cannot be used (Ray not installed, a cluster that cannot be reached)."""


@dataclass
class Unit:
    """One unit's record: its stage (capture, ...), its label, the worker that ran it and its seconds."""
    stage: str
    label: str
    worker: str
    seconds: float

    def to_json(self) -> dict:
        return {"stage": self.stage, "unit": self.label, "worker": self.worker, "seconds": round(self.seconds, 4)}


def cpus() -> int:
    """CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _timed(fn: Callable, item) -> tuple[Any, str, float]:
    """`fn(item)`, the worker that ran it (host:pid) and its seconds."""
    t0 = time.perf_counter()
    out = fn(item)
    return out, f"{socket.gethostname()}:{os.getpid()}", time.perf_counter() - t0


LOG: list = []
"""(executor description, :class:`Unit`) of every unit run in this process's runs, read
and cut by the run that made them (:func:`collect`)."""


def record(stage: str, label: str, seconds: float) -> None:
    """A unit this process ran itself (the single-device capture), for the run's timings."""
    LOG.append(("serial", Unit(stage, label, f"{socket.gethostname()}:{os.getpid()}", seconds)))


def collect(mark: int) -> tuple[str, list]:
    """The units logged since ``len(LOG) == mark`` (removed from the log) and the
    executor(s) that ran them."""
    got, LOG[mark:] = LOG[mark:], []
    kinds = [d for d, _ in got if d != "serial"] or ["serial"]
    return ", ".join(dict.fromkeys(kinds)), [u.to_json() for _, u in got]


def stage_times(capture: Optional[dict], proof: float, confirm: float) -> dict:
    """A run's timings (the report's ``stats.timings``): seconds per stage (capture,
    proof, confirm), the executor and each unit with its worker."""
    stages = {"capture": round(capture["seconds"], 4)} if capture else {}
    stages.update(proof=round(proof, 4), confirm=round(confirm, 4))
    out = {"executor": capture["executor"] if capture else "serial", "stages": stages,
           "units": capture["units"] if capture else []}
    return out


def without_timings(report: dict) -> dict:
    """A JSON report (``Report.to_json()``) less what depends on the machine's speed and on
    the executor (stats.timings and the seconds): what every executor must give alike
    (``rank_classes`` included: every executor captures one representative per class)."""
    out = {**report, "stats": {k: v for k, v in report.get("stats", {}).items()
                               if k not in ("timings", "seconds", "wall_seconds")}}
    for part in ("confirmation", "temporal"):
        if out.get(part):
            out[part] = {k: v for k, v in out[part].items() if k != "seconds"}
    return out


_TASK: list = []  # the function the forked workers run (set before the fork)


def _forked(item):
    _ACTIVE.clear()  # a unit's own units run in its worker, serially
    torch = sys.modules.get("torch")
    if torch is not None:  # OpenMP's thread team does not survive fork: a worker computes on one thread
        torch.set_num_threads(1)
    return _timed(_TASK[0], item)


class Executor:
    """Runs units in this process; subclasses run them elsewhere. `units` records each one."""
    kind = "serial"

    def __init__(self, workers: Optional[int] = None):
        self.workers = 1 if workers is None else max(1, workers)
        self.units: list[Unit] = []

    def describe(self) -> str:
        """serial (in this process), or the kind and its workers."""
        if self.workers == 1:
            return "serial" if self.kind in ("serial", "local") else f"{self.kind}, 1 worker"
        return f"{self.kind}, {self.workers} workers"

    def map(self, fn: Callable, items: Iterable, stage: str = "work", labels: Optional[list] = None,
            progress: Optional[Callable[[int], None]] = None) -> list:
        """``[fn(x) for x in items]``; `progress(i)` before item i is submitted."""
        items = list(items)
        labels = labels or [str(x) for x in items]
        timed = self._map(fn, items, progress)
        units = [Unit(stage, label, worker, s) for label, (_, worker, s) in zip(labels, timed)]
        self.units += units
        LOG.extend((self.describe(), u) for u in units)
        return [out for out, _, _ in timed]

    def _map(self, fn, items, progress):
        out = []
        for i, item in enumerate(items):
            if progress:
                progress(i)
            out.append(_timed(fn, item))
        return out

    def close(self) -> None:
        """Release what the executor holds (a Ray instance it started)."""


class LocalExecutor(Executor):
    """A pool of forked processes (``concurrent.futures.ProcessPoolExecutor``); one worker,
    one item, or no ``fork`` start method: this process."""
    kind = "local"

    def __init__(self, workers: Optional[int] = None):
        super().__init__(cpus() if workers is None or workers <= 0 else workers)

    def _map(self, fn, items, progress):
        if self.workers == 1 or len(items) <= 1 or "fork" not in multiprocessing.get_all_start_methods():
            return super()._map(fn, items, progress)
        _TASK[:] = [fn]
        try:
            with ProcessPoolExecutor(max_workers=min(self.workers, len(items)),
                                     mp_context=multiprocessing.get_context("fork")) as pool:
                futures = []
                for i, item in enumerate(items):
                    if progress:
                        progress(i)
                    futures.append(pool.submit(_forked, item))
                return [f.result() for f in futures]
        finally:
            _TASK.clear()


RAY_HELP = ("install it with `pip install 'shardproof[ray]'` (ray==2.60.0), or use --executor local "
            "(a process pool on this machine) or --executor serial")


def _user_modules() -> list:
    """Modules a Ray worker could not import by name: those loaded from files outside the
    installed packages and outside shardproof itself (a case file's siblings, a test's
    helpers); they travel by value with the function."""
    roots = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    found = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if not path or "." in name or name.startswith("shardproof") or name == "__main__":
            continue
        real = os.path.realpath(path)
        if "site-packages" in real or "dist-packages" in real or any(real.startswith(r + os.sep) for r in roots):
            continue
        found.append(module)
    return found


class RayExecutor(Executor):
    """Ray tasks (one CPU each) on the cluster at `address`; None or ``local``: a Ray
    instance started here on loopback, with `workers` CPUs (default: this machine's),
    stopped by :meth:`close`. An address that cannot be reached, or Ray not installed:
    :class:`ExecutorError`."""
    kind = "ray"

    def __init__(self, address: Optional[str] = None, workers: Optional[int] = None):
        try:
            import ray
        except ImportError as exc:
            raise ExecutorError(f"--executor ray needs Ray, which is not importable here ({exc}); {RAY_HELP}.") from None
        self.ray = ray
        self.address = None if address in (None, "", "local") else address
        self.started = False
        if not ray.is_initialized():
            self._init(workers)
            self.started = True
        total = int(ray.cluster_resources().get("CPU", 1))
        super().__init__(min(workers, total) if workers and workers > 0 else total)

    def _unreachable(self) -> Optional[str]:
        """Why the cluster's address does not answer (a TCP connection to it, in 5 s), or
        None: Ray itself retries an unreachable address for minutes."""
        address = self.address.split("://", 1)[-1]
        host, sep, port = address.rpartition(":")
        if address == "auto" or not sep or not port.isdigit():
            return None if address == "auto" else f"{self.address!r} is not host:port"
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
        except OSError as exc:
            return f"nothing answers at {host}:{port} ({exc.strerror or exc})"
        return None

    def _init(self, workers):
        options = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR",
                   "configure_logging": False}
        env = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))}
        where = f"the Ray cluster at {self.address}" if self.address else "a local Ray instance on loopback"
        why = self._unreachable() if self.address else None
        try:
            if why:
                raise ConnectionError(why)
            if self.address is None:
                self.ray.init(num_cpus=workers if workers and workers > 0 else cpus(), _node_ip_address="127.0.0.1",
                              runtime_env={"env_vars": env}, **options)
            else:
                self.ray.init(address=self.address, **options)
        except Exception as exc:  # noqa: BLE001  (Ray's errors: no address, refused, version mismatch)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ExecutorError(f"--executor ray could not connect to {where}: {first}. Check that the cluster "
                                f"is running (`ray start --head` prints its address) and that this machine "
                                f"reaches it, or omit --address to start a local instance.") from None

    def _map(self, fn, items, progress):
        from ray import cloudpickle
        for module in _user_modules():
            try:
                cloudpickle.register_pickle_by_value(module)
            except ValueError:  # already registered, or not a module cloudpickle can send by value
                pass
        task = self.ray.remote(num_cpus=1)(_timed)
        ref = self.ray.put(fn)
        refs = []
        for i, item in enumerate(items):
            if progress:
                progress(i)
            refs.append(task.remote(ref, item))
        return self.ray.get(refs)

    def close(self) -> None:
        if self.started and self.ray.is_initialized():
            self.ray.shutdown()
        self.started = False


def make(kind: str = "local", address: Optional[str] = None, workers: Optional[int] = None) -> Executor:
    """An executor of `kind` (:data:`KINDS`); `workers`: processes (local; None or 0: one
    per CPU) or CPUs used on the cluster (ray)."""
    if kind == "serial":
        return Executor()
    if kind == "local":
        return LocalExecutor(workers)
    if kind == "ray":
        return RayExecutor(address, workers)
    raise ExecutorError(f"unknown executor {kind!r}: one of {', '.join(KINDS)}")


_ACTIVE: list = []  # the executor of the run in progress (the CLI's --executor), innermost last


def active() -> Optional[Executor]:
    """The executor the current run was given (:class:`using`), or None."""
    return _ACTIVE[-1] if _ACTIVE else None


class using:
    """``with using(executor):`` units of work of the run go to `executor` (closed at the end)."""

    def __init__(self, executor: Executor):
        self.executor = executor

    def __enter__(self) -> Executor:
        _ACTIVE.append(self.executor)
        return self.executor

    def __exit__(self, *exc) -> None:
        _ACTIVE.remove(self.executor)
        self.executor.close()
