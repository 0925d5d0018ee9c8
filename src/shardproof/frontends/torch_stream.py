"""Executing large dumps in less memory (for :mod:`.torch_exec`).

* **One rank at a time.** The ranks run in lockstep (their collectives meet), so every
  rank's live values are held at once: the peak is the sum of the ranks' live sets. With
  :class:`Spill`, the values of a rank that is not running are written to a scratch folder
  when another rank starts running and read back when it needs them; the peak becomes one
  rank's live set (plus a collective's operands), at the price of the writes.
* **Floats held as the graph declares them.** :func:`held_as_declared` holds f32 values in
  float32 (not float64, :data:`~.torch_exec_ops.HELD`), halving every float tensor; the
  comparison's tolerance is the dtype's anyway (engine/confirm.py).

Values are freed after their last use by the executor itself (:class:`.torch_exec._Runner`).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

import torch

from ..ir.graph import DistributedProgram, Graph
from . import torch_exec_ops
from .torch_chunks import peak_bytes, plan_chunks


class Spilled:
    """A value written to disk while its rank is not running."""
    __slots__ = ("path",)

    def __init__(self, path: str):
        self.path = path


class Spill:
    """Writes the values of the ranks not running to `folder` (a scratch folder by default).
    A value read back is a copy: views of one storage stop sharing it (dumps are functional;
    an in-place op on a spilled alias would not reach its base)."""

    def __init__(self, folder: str | None = None):
        self.folder = folder or tempfile.mkdtemp(prefix="shardproof-spill-")
        self.running = None
        self.envs: dict[int, dict] = {}
        self.count = 0
        self.written = 0

    def switch_to(self, rank: int, env: dict) -> None:
        """`rank` runs next: every other rank's values go to disk."""
        self.envs[rank] = env
        if self.running == rank:
            return
        for r, other in self.envs.items():
            if r != rank:
                for node, value in list(other.items()):
                    if torch.is_tensor(value) and value.numel() > 1024:
                        other[node] = self._write(value)
        self.running = rank

    def _write(self, value: torch.Tensor) -> Spilled:
        self.count += 1
        path = os.path.join(self.folder, f"{self.count}.pt")
        if value.untyped_storage().nbytes() > value.numel() * value.element_size():
            value = value.clone()  # a view: its own elements, not the whole storage it views
        torch.save(value, path)
        self.written += value.numel() * value.element_size()
        return Spilled(path)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def unspill(value, env: dict | None = None, node=None):
    """`value` read back where it was spilled (recursively in tuples and lists); with `env`
    and `node`, put back in the rank's values (its file removed)."""
    if isinstance(value, Spilled):
        loaded = torch.load(value.path)
        if env is not None and node is not None:
            env[node] = loaded
            os.remove(value.path)
        return loaded
    if isinstance(value, (tuple, list)):
        return type(value)(unspill(v) for v in value)
    return value


@contextlib.contextmanager
def held_as_declared():
    """Within it, f32 values are held in float32 (f16/bf16 too: in float32, rounded to their
    format where the graph casts), complex c64 in complex64."""
    saved = dict(torch_exec_ops.HELD)
    torch_exec_ops.HELD.update({"f32": torch.float32, "f16": torch.float32, "bf16": torch.float32,
                                "c64": torch.complex64})
    try:
        yield
    finally:
        torch_exec_ops.HELD.clear()
        torch_exec_ops.HELD.update(saved)


def estimate_bytes(seq: Graph, dist: DistributedProgram, stream: bool = False,
                   chunks: bool = False) -> tuple[int, str, int]:
    """(peak bytes an :func:`execute` run needs, the largest tensor's node name, its bytes).

    Each graph's peak of live values (freed after their last use, float values at 8 bytes
    per element -- 4 within :func:`~.torch_stream.held_as_declared` for f32; views counted
    as copies, so an upper bound) -- the single-device graph alone, then every rank at its
    peak at once (ranks run interleaved), or with `stream` the largest rank's alone (ranks
    one at a time; a collective's operands not counted). With `chunks`, values computed a
    chunk at a time count one chunk (:func:`.torch_chunks.peak_bytes`)."""
    seq_peak, name, size = peak_bytes(seq, plan_chunks(seq) if chunks else None)
    total = 0
    for g in dist.graphs:
        peak, n, s = peak_bytes(g, plan_chunks(g) if chunks else None)
        total = max(total, peak) if stream else total + peak
        if s > size:
            name, size = n, s
    return max(seq_peak, total), name, size


def fitting(seq, dist, limit: int) -> tuple[int, str, int, dict | None]:
    """The cheapest way to run the programs within `limit` bytes: (the estimated peak, the
    largest tensor's node, its bytes, the :func:`~.torch_exec.execute` options, or None
    when none fits). Tried in order: float64, ranks interleaved; float64, ranks one at a
    time; floats held as declared, interleaved; the same, ranks one at a time; the last two
    with the largest values computed a chunk at a time (:mod:`.torch_chunks`: they recompute
    what several sinks read, so they come last)."""
    need = None
    for options in ({}, {"stream": True}, {"precision": "declared"}, {"stream": True, "precision": "declared"},
                    {"precision": "declared", "chunks": True}, {"stream": True, "precision": "declared", "chunks": True}):
        with held_as_declared() if options.get("precision") else contextlib.nullcontext():
            need, name, size = estimate_bytes(seq, dist, stream=bool(options.get("stream")),
                                              chunks=bool(options.get("chunks")))
        if need <= limit:
            return need, name, size, options
    return need, name, size, None
