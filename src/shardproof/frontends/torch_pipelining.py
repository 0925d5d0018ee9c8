"""``torch.distributed.pipelining`` (``PipelineStage`` and its schedules) as it runs under
the fake process group, for capture and for the eager run of the temporal checks.

Two things stop its schedules from tracing as they are, and both are dealt with here,
without changing what the schedule computes or the P2P ops it issues for data:

- the P2P warm-up vote (``_PipelineSchedule._warmup_p2p``) sends each stage's "static
  metadata" vote around the pipeline and branches on ``result.item()`` (a data-dependent
  guard; under the fake process group nothing arrives). A stage given its static shapes
  (``input_args``/``output_args``) votes STATIC whatever the others vote only if every stage
  does; so the mode is decided locally: STATIC where this rank's stages have their shapes,
  else a :class:`~shardproof.frontends.torch_capture.CaptureError` naming the stage (the
  DYNAMIC mode's shape inference exchanges pickled objects with ``send_object_list``, which
  has no dataflow meaning). The vote's own sends carry no value the step uses: not issued.
- ``Work.wait()`` has no graph node: the P2P ops the schedule issues (``batch_isend_irecv``,
  ``isend``/``irecv``) go through :mod:`.torch_p2p`, whose handles record their waits in the
  rank's program order.
"""
from __future__ import annotations

import contextlib


def _static_warmup(self, stages, has_backward, p2p_done):
    from torch.distributed.pipelining._utils import InferenceMode
    from torch.distributed.pipelining.stage import PipelineStage
    from .torch_capture import CaptureError
    if not all(isinstance(stage, PipelineStage) for stage in stages):
        return _ORIGINAL[0](self, stages, has_backward, p2p_done)  # pipeline()'s stages: no vote, zeros exchanged
    for stage in stages:
        if InferenceMode.needs_dynamic(stage._user_meta, has_backward):
            raise CaptureError(f"pipeline stage {stage.stage_index} has no static input/output shapes: its schedule "
                               f"would infer them with send_object_list, which has no dataflow meaning; give "
                               f"PipelineStage(..., input_args=..., output_args=...) example tensors")
        stage._inference_mode = InferenceMode.STATIC


_ORIGINAL: list = []


@contextlib.contextmanager
def static_pipelining():
    """Decide the schedules' warm-up vote locally (see the module doc) inside the block."""
    try:
        from torch.distributed.pipelining.schedules import _PipelineSchedule
    except ImportError:  # a torch without pipelining
        yield
        return
    saved = _PipelineSchedule.__dict__.get("_warmup_p2p")
    if saved is None or saved is _static_warmup:
        yield
        return
    _ORIGINAL[:] = [saved]
    _PipelineSchedule._warmup_p2p = _static_warmup
    try:
        yield
    finally:
        _PipelineSchedule._warmup_p2p = saved
