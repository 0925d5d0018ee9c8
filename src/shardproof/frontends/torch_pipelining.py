"""``torch.distributed.pipelining`` (``PipelineStage`` and its schedules) as it runs under
the fake process group, for capture and for the eager run of the temporal checks.

Two things stop its schedules from tracing as they are, and both are dealt with here,
without changing what the schedule computes or the P2P ops it issues for data:

- the P2P warm-up vote (``_PipelineSchedule._warmup_p2p``) sends each stage's "static
  metadata" vote around the pipeline and branches on ``result.item()`` (a data-dependent
  guard; under the fake process group nothing arrives). A stage given its static shapes
  (``input_args``/``output_args``) votes STATIC whatever the others vote only if every stage
  does; so the mode is decided locally: STATIC where this rank's stages have their shapes,
  else (DYNAMIC mode: its shape inference exchanges pickled objects with ``send_object_list``,
  which has no dataflow meaning) a :class:`~.torch_stage_shapes.ShapesNeeded` naming the stage,
  upon which a training case's capture infers every stage's metadata across the stages first
  and traces each stage STATIC on it (:mod:`.torch_stage_shapes`; the vote, the metadata sends
  and receives go through its mailbox). The vote's own sends carry no value the step uses: not issued.
- ``Work.wait()`` has no graph node: the P2P ops the schedule issues (``batch_isend_irecv``,
  ``isend``/``irecv``) go through :mod:`.torch_p2p`, whose handles record their waits in the
  rank's program order.

Every op a stage runs for a microbatch (its forward, backward, weight backward) and every
P2P op it issues for one is marked with (stage index, microbatch) (:func:`.torch_p2p.
pipeline_position`): findings name them.
"""
from __future__ import annotations

import contextlib


def _static_warmup(self, stages, has_backward, p2p_done):
    from torch.distributed.pipelining._utils import InferenceMode
    from torch.distributed.pipelining.stage import PipelineStage
    from . import torch_stage_shapes
    if not all(isinstance(stage, PipelineStage) for stage in stages):
        return _ORIGINAL[0](self, stages, has_backward, p2p_done)  # pipeline()'s stages: no vote, zeros exchanged
    if torch_stage_shapes.warmup(stages, has_backward):  # the shapes inferred across the stages (or being)
        return
    for stage in stages:
        if InferenceMode.needs_dynamic(stage._user_meta, has_backward):
            raise torch_stage_shapes.ShapesNeeded(
                f"pipeline stage {stage.stage_index} has no static input/output shapes: its schedule infers them "
                f"with send_object_list from the previous stage's outputs (computed on another rank); training "
                f"cases infer them across the stages before capture (frontends/torch_stage_shapes.py); give "
                f"PipelineStage(..., input_args=..., output_args=...) example tensors here")
        stage._inference_mode = InferenceMode.STATIC


_ORIGINAL: list = []
_POSITION = "_shardproof_position"  # on a P2POp the stage made: (stage index, microbatch)
_COMPUTE = ("forward_one_chunk", "backward_one_chunk", "backward_weight_one_chunk")
_P2P_OPS = ("get_fwd_recv_ops", "get_bwd_recv_ops", "get_fwd_send_ops", "get_bwd_send_ops")


def _computing(method):
    def run(self, chunk_id, *args, **kwargs):
        from .torch_p2p import pipeline_position
        from .torch_stage_shapes import computing
        computing()  # the shape-inference pre-pass stops here
        with pipeline_position(self.stage_index, chunk_id):
            return method(self, chunk_id, *args, **kwargs)
    return run


def _making_ops(method):
    def make(self, chunk_id, *args, **kwargs):
        ops = method(self, chunk_id, *args, **kwargs)
        for op in ops:
            setattr(op, _POSITION, (self.stage_index, chunk_id))
        return ops
    return make


def _positioned_batch(original):
    def batch_p2p(p2p_ops, desc=None):
        """The ops in runs of one (stage, microbatch), each issued at its position."""
        from .torch_p2p import pipeline_position
        works, run = [], []
        for op in list(p2p_ops) + [None]:
            if run and (op is None or getattr(op, _POSITION, None) != getattr(run[0], _POSITION, None)):
                with pipeline_position(*getattr(run[0], _POSITION, (None, None))):
                    works.extend(original(run, desc))
                run = []
            if op is not None:
                run.append(op)
        return works
    return batch_p2p


def _meta_exchange(name: str, original):
    """``PipelineStage._send_meta``/``_recv_meta``/``_validate_inferred_metadata`` through the
    shape-inference mailbox (frontends/torch_stage_shapes.py) where one is active."""
    def exchange(self, *args):
        from . import torch_stage_shapes as shapes
        if shapes.active() is None:
            return original(self, *args)
        return {"_send_meta": shapes.send_meta, "_recv_meta": shapes.recv_meta,
                "_validate_inferred_metadata": shapes.inferred}[name](self, *args)
    return exchange


_META_METHODS = ("_send_meta", "_recv_meta", "_validate_inferred_metadata")


@contextlib.contextmanager
def static_pipelining():
    """Decide the schedules' warm-up vote locally and mark stage and microbatch (see the
    module doc) inside the block."""
    try:
        from torch.distributed.pipelining import schedules
        from torch.distributed.pipelining.stage import PipelineStage, _PipelineStageBase
    except ImportError:  # a torch without pipelining
        yield
        return
    saved = schedules._PipelineSchedule.__dict__.get("_warmup_p2p")
    if saved is None or saved is _static_warmup:  # not there, or already inside
        yield
        return
    _ORIGINAL[:] = [saved]
    patches = [(schedules._PipelineSchedule, "_warmup_p2p", _static_warmup),
               (schedules, "_batch_p2p", _positioned_batch(schedules._batch_p2p))]
    patches += [(_PipelineStageBase, name, _computing(getattr(_PipelineStageBase, name))) for name in _COMPUTE
                if hasattr(_PipelineStageBase, name)]
    patches += [(_PipelineStageBase, name, _making_ops(getattr(_PipelineStageBase, name))) for name in _P2P_OPS
                if hasattr(_PipelineStageBase, name)]
    patches += [(PipelineStage, name, _meta_exchange(name, getattr(PipelineStage, name))) for name in _META_METHODS
                if name in PipelineStage.__dict__]
    undo = [(owner, name, owner.__dict__[name]) for owner, name, _ in patches]
    try:
        for owner, name, fn in patches:
            setattr(owner, name, fn)
        yield
    finally:
        for owner, name, fn in undo:
            setattr(owner, name, fn)
