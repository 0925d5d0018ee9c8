"""The Python API's shared pieces: progress callbacks, the input error, the prepared
(captured or loaded, related) programs, and training-step output names (see :mod:`.api`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from .case import Case
from .ir.graph import DistributedProgram, Graph

Progress = Optional[Callable[[str, int, int], None]]
"""``progress(stage, done, total)``: `done` of `total` steps are finished, `stage` is under way."""


def _quiet(stage: str, done: int, total: int) -> None:
    pass


def _offset(progress: Progress, done: int, total: int) -> Progress:
    """The engine's progress (its own steps) as steps `done`.. of `total` of the whole run."""
    if progress is None:
        return None
    return lambda stage, d, t: progress(stage, done + d, total)


class InputError(Exception):
    """Bad input (exit code 3): an unloadable case, an untraceable program, bad relations."""


def _numpy(values: dict) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().double().numpy() if v.is_floating_point() else v.detach().cpu().numpy()
            for k, v in values.items()}


REDRAW_SEED = 20_241_114
"""The seed of the distinct values shardproof gives a live case's single-device weights
before the distributed programs are built from them (deterministic runs)."""


GRADIENT_OUTPUTS = ("grad:", "updated:")


def training_renames(names, bindings: dict) -> dict:
    """Distributed step outputs named after the single-device parameter they belong to:
    ``grad:<dist param>`` -> ``grad:<single param>`` (others are absent)."""
    renamed = {}
    for name in names:
        prefix = next((p for p in GRADIENT_OUTPUTS if name.startswith(p)), None)
        b = bindings.get(name[len(prefix):]) if prefix else None
        if b is not None:
            renamed[name] = prefix + b.seq_name
    return renamed


@dataclass
class Prepared:
    """A captured case or loaded dumps, with input relations and the outputs to check
    (keyed alike on both sides): everything the engine needs."""
    seq: Graph
    dist: DistributedProgram
    bindings: dict
    expect: dict
    examples: dict
    name: str = ""
    gradients: frozenset = frozenset()  # training: outputs that are gradients or updated parameters
    case: Optional[Case] = None  # a live case, run for real to confirm a proof (dumps: None)
    pairing: list = field(default_factory=list)  # dumps with --auto-relations: how outputs were paired
    stated: frozenset = frozenset()  # outputs expected as the returned DTensor's placements state
    capture: Optional[dict] = None  # a live case's capture: seconds, executor, units (engine/executor.py)
    partial_ok: tuple = ()  # dumps: outputs allowed to be partial sums (engine/partial_outputs.py)
