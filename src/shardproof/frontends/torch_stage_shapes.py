"""Shape inference for ``torch.distributed.pipelining`` stages built without static shapes
(``PipelineStage(submod, i, n, device)`` with no ``input_args``/``output_args``).

PyTorch infers them at the schedule's first step (DYNAMIC mode): stage 0 runs its forward on
the real input and sends its outputs' metadata (shape, dtype, requires_grad: a
``_StageForwardMeta``) to stage 1 with ``send_object_list``, which builds empty inputs from it,
runs its forward and passes its outputs on; the last stage runs the loss and backward, and the
input gradients' metadata (``_StageBackwardMeta``) travel back the same way. Under the fake
process group nothing arrives, and a rank is traced alone, so here the exchange is done in the
capture process before any rank is traced (:func:`infer`):

- a vote pass runs every rank's step until its schedule's warm-up vote and records, per stage,
  whether it needs inference (PyTorch's ``InferenceMode.needs_dynamic``); the pipeline is DYNAMIC
  when any stage does, as the real vote decides;
- inference passes run the ranks again, in rank order, eagerly on the fake process group, with
  each stage's ``_send_meta`` posting its metadata in a mailbox keyed by (from stage, to stage)
  and ``_recv_meta`` taking it from there; a rank whose stage waits for metadata not yet posted
  stops there and runs again in the next pass; a rank stops for good when its schedule starts
  computing (its stages' metadata complete). PyTorch's own inference code runs unchanged, its
  validation included, except that a stage's given metadata disagreeing with what its
  neighbour sends is an error (PyTorch raises on it too), naming both stages;
- the capture then runs every stage STATIC with the inferred metadata as its own (no inference
  traced into the graph), so the P2P buffers are built from exactly what PyTorch exchanges.

A stage whose metadata never arrives (a pass with no progress) is a :class:`CaptureError`
naming it, never a guess.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable

from .torch_capture import CaptureError, fake_world


class ShapesNeeded(CaptureError):
    """A stage needs dynamic shape inference and no inferred metadata is active."""


class _Pending(Exception):
    """Pre-pass: this rank stops here (its vote recorded, or metadata not yet posted)."""


class _Inferred(Exception):
    """Pre-pass: the rank's schedule starts computing (its stages' metadata are complete)."""


class Mailbox:
    def __init__(self):
        self.votes: dict[int, bool] = {}          # stage -> needs dynamic inference
        self.posted: dict[tuple, Any] = {}        # (from stage, to stage) -> _StageForwardMeta / _StageBackwardMeta
        self.meta: dict[int, Any] = {}            # stage -> its inferred _StageMeta
        self.phase = "capture"                    # "vote", "infer" (the pre-pass) or "capture"


_BOX: list = []  # the active mailbox (one at a time)


def active() -> Mailbox | None:
    return _BOX[-1] if _BOX else None


@contextlib.contextmanager
def using(box: Mailbox):
    _BOX.append(box)
    try:
        yield box
    finally:
        _BOX.pop()


def warmup(stages, has_backward: bool) -> bool:
    """The schedule's warm-up vote under the mailbox; True when it decided the stages' mode
    (else the caller refuses as without inference)."""
    from dataclasses import replace
    from torch.distributed.pipelining._utils import InferenceMode
    box = active()
    if box is None:
        return False
    if box.phase == "vote":
        for stage in stages:
            box.votes[stage.stage_index] = InferenceMode.needs_dynamic(stage._user_meta, has_backward)
        raise _Pending
    dynamic = any(box.votes.values())
    for stage in stages:
        if box.phase == "infer":
            stage._inference_mode = InferenceMode.DYNAMIC if dynamic else InferenceMode.STATIC
            continue
        if dynamic:  # capture: STATIC on the metadata the inference produced
            if stage.stage_index not in box.meta:
                raise CaptureError(f"pipeline stage {stage.stage_index}: shape inference produced no metadata for it "
                                   f"(its schedule never ran it in the inference passes)")
            stage._user_meta = replace(box.meta[stage.stage_index])
        stage._inference_mode = InferenceMode.STATIC
    return True


def send_meta(stage, meta, dst_stage: int) -> None:
    box = active()
    key = (stage.stage_index, dst_stage)
    if box.phase == "infer":
        if key in box.posted and box.posted[key] != meta:
            raise CaptureError(f"pipeline stage {stage.stage_index} sends stage {dst_stage} metadata "
                               f"{_describe(meta)} on one pass and {_describe(box.posted[key])} on another")
        box.posted[key] = meta


def recv_meta(stage, src_stage: int):
    box = active()
    key = (src_stage, stage.stage_index)
    if key not in box.posted:
        if box.phase == "infer":
            raise _Pending
        raise CaptureError(f"pipeline stage {stage.stage_index} waits for shape metadata stage {src_stage} never sends")
    return box.posted[key]


def inferred(stage) -> None:
    """A stage finished an inference step: keep its metadata; its given metadata (``input_args``
    etc.) must agree with the inferred (PyTorch raises there too), an error naming the stage."""
    from torch.distributed.pipelining._utils import validate_tensors_metadata
    box = active()
    if box is None or box.phase != "infer":
        return
    user, got = stage._user_meta, stage._stage_meta
    for label in ("inputs", "outputs", "input_grads", "output_grads"):
        mine, theirs = getattr(user, label), getattr(got, label)
        if mine and theirs:
            try:
                validate_tensors_metadata(f"stage {stage.stage_index} {label}", mine, theirs)
            except Exception as exc:  # noqa: BLE001  (PipeliningMetadataError: a disagreement)
                peer = {"inputs": stage.stage_index - 1, "output_grads": stage.stage_index + 1}.get(label)
                whom = f" (what stage {peer} sends)" if peer is not None else ""
                raise CaptureError(f"pipeline stage {stage.stage_index}: its given {label} disagree with the "
                                   f"inferred {label}{whom}: {exc}") from exc
    from dataclasses import replace
    box.meta[stage.stage_index] = replace(got)


def computing() -> None:
    """A stage starts computing a microbatch: in the pre-pass, the rank's inference is done."""
    box = active()
    if box is not None and box.phase in ("vote", "infer"):
        raise _Inferred


def _describe(meta) -> str:
    metas = getattr(meta, "forward_metas", None) or getattr(meta, "backward_metas", None) or ()
    return "(" + ", ".join(f"{tuple(m.shape)} {m.dtype}" if m is not None else "None" for m in metas) + ")"


def infer(make_program: Callable, world: int, data_of: Callable, train) -> Mailbox:
    """Every stage's metadata, exchanged as PyTorch's DYNAMIC mode does (module doc): the ranks'
    steps run eagerly on the fake process group, in rank order, until each has its stages'
    metadata. A CaptureError when a rank fails otherwise or no pass makes progress."""
    from .torch_collectives import functional_collectives
    box = Mailbox()
    pending = list(range(world))
    with using(box):
        box.phase = "vote"
        for rank in pending:
            _run(make_program, rank, world, data_of, train, functional_collectives)
        box.phase = "infer"
        while pending:
            before = (len(box.posted), len(box.meta))
            pending = [r for r in pending if not _run(make_program, r, world, data_of, train, functional_collectives)]
            if pending and (len(box.posted), len(box.meta)) == before:
                waiting = sorted(set(box.votes) - set(box.meta))
                raise CaptureError(f"pipeline shape inference makes no progress: stage(s) {waiting} (on rank(s) "
                                   f"{pending}) wait for metadata no stage sends")
    box.phase = "capture"
    return box


def _run(make_program, rank: int, world: int, data_of, train, functional_collectives) -> bool:
    """Rank `rank`'s step in the pre-pass; True when its stages' metadata are complete."""
    import logging
    from dataclasses import replace
    quiet = logging.getLogger("torch.distributed.pipelining.schedules")  # it logs the pre-pass's stop as an error
    with fake_world(rank, world), functional_collectives(), _level(quiet, logging.CRITICAL + 1):
        program = make_program(rank, world)
        try:
            program.train_step(data_of(rank), {}, replace(train, optimizer=None, grad_clip=None))
        except _Pending:
            return False
        except _Inferred:
            return True
        except CaptureError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise CaptureError(f"pipeline shape inference: rank {rank}'s step failed: {type(exc).__name__}: {exc}") from exc
    return True


@contextlib.contextmanager
def _level(logger, level: int):
    saved = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(saved)


def with_stage_shapes(capture: Callable, make_program: Callable, world: int, data_of: Callable, train):
    """``capture()``; where a pipeline stage needs shape inference, once more with the inferred
    metadata (:func:`infer`)."""
    try:
        return capture()
    except ShapesNeeded:
        box = infer(make_program, world, data_of, train)
    with using(box):
        return capture()
