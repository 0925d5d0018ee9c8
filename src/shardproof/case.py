"""A verification case: the single-device program, the per-rank program, example inputs.

Case files are ordinary Python modules that define ``case(world_size=2) -> Case``.
Programs are PyTorch modules or functions called with the inputs as keyword arguments;
a module's parameters and buffers are inputs too, named as in ``named_parameters()``.
Torch is only needed to *capture* a case; everything after capture is torch-free.

With ``backend="jax"`` the programs are JAX functions (see
:mod:`shardproof.frontends.jax_lower`): ``single`` takes the inputs positionally,
``distributed(mesh)`` returns the ``shard_map`` program over a 1-D mesh with axis
``mesh_axis``, and ``in_specs`` gives each input's ``PartitionSpec``.

A case with ``train=Train(...)`` verifies one *training step* instead of the forward pass:
the single-device step (forward on the whole batch, the loss, the gradients and, with an
optimizer, the updated parameters) is written by shardproof from the :class:`Train` spec;
each rank's step is the distributed program's own ``train_step`` method (its framework:
microbatches, gradient reductions over dp/tp groups, clipping, ZeRO), see :class:`Train`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union


@dataclass(frozen=True)
class SGD:
    """``p - lr * (g + weight_decay * p)``; with momentum, state ``momentum_buffer``:
    ``buf = momentum * buf + g``, the update uses ``buf`` (torch.optim.SGD, dampening 0)."""
    lr: float = 0.1
    momentum: float = 0.0
    weight_decay: float = 0.0

    @property
    def state_names(self) -> tuple[str, ...]:
        return ("momentum_buffer",) if self.momentum else ()


@dataclass(frozen=True)
class AdamW:
    """torch.optim.AdamW's update taken as step number ``step`` (bias corrections use it);
    state ``exp_avg`` and ``exp_avg_sq`` are inputs of the step (as the optimizer holds them)."""
    lr: float = 1e-3
    betas: tuple = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.01
    step: int = 3

    @property
    def state_names(self) -> tuple[str, ...]:
        return ("exp_avg", "exp_avg_sq")


@dataclass(frozen=True)
class Train:
    """One training step, as the single-device program takes it (the reference).

    - ``loss``: the name of the program output that is the loss, or ``fn(outputs, inputs)``
      returning a scalar (``outputs`` as the program returns them; ``inputs`` the batch);
      the single-device loss is taken over the whole batch (e.g. a mean over all tokens);
      the forward is called with the inputs it takes by name, the rest (targets, masks) are
      the loss's.
    - ``optimizer``: None (gradients only), :class:`SGD` or :class:`AdamW`.
    - ``microbatches``: how many microbatches each rank splits its batch into (the
      distributed step accumulates; the reference takes the whole batch at once).
    - ``grad_clip``: clip gradients to this global L2 norm (over all parameters) before the update.
    - ``loss_scale``: a static loss scale the distributed step multiplies the loss by and
      divides the gradients by (the reference is unscaled).

    The distributed program (a module) defines ``train_step(self, inputs, state, train)``:
    ``inputs`` are the rank's data, ``state`` maps each of its parameter names to its
    optimizer state tensors (by the optimizer's state names; shardproof makes them, laid out
    as the parameter is), ``train`` is this spec. It returns ``{"loss": scalar, "grads":
    {param: grad}, "updated": {param: new value}}`` (``updated`` with an optimizer); its
    parameters are the graph inputs, so ``self.parameters()`` are what gradients are taken of.

    Outputs checked: ``loss``, ``grad:<param>`` and ``updated:<param>``, each named by the
    single-device parameter. Expected by default: a gradient and an updated value are
    related to the single-device ones exactly as the parameter is (Shard stays Shard; a
    replicated parameter must end replicated: a gradient left as a partial sum is a
    missing gradient reduction); the loss is recoverable from the ranks."""
    loss: Union[str, Callable] = "out"
    optimizer: Optional[Union[SGD, AdamW]] = None
    microbatches: int = 1
    grad_clip: Optional[float] = None
    loss_scale: Optional[float] = None


@dataclass
class Case:
    single: Any
    """The single-device program: an ``nn.Module`` or a function of the inputs."""
    distributed: Callable[[int, int], Any]
    """``(rank, world_size) -> program`` for each rank; uses ``torch.distributed`` collectives
    or DTensor. A module's parameters hold that rank's shard of the single-device weights."""
    inputs: dict[str, Any]
    """Example data inputs by name (single-device values)."""
    world_size: int = 2
    dist_inputs: Optional[Callable[[int, int, dict], dict]] = None
    """``(rank, world_size, inputs) -> that rank's data inputs``; default: the same inputs."""
    relations: Optional[dict] = None
    """Distributed input name (or glob) -> relation; default: inferred by value matching."""
    expect: Optional[dict] = None
    """Output name -> expected relation; default: each output recoverable from the ranks
    (training: see :class:`Train`; names may be globs there, e.g. ``{"grad:*": "Shard(0)"}``
    for a step that returns reduce-scattered gradients)."""
    train: Optional[Train] = None
    """Verify a training step rather than the forward pass (see :class:`Train`)."""
    name: str = ""
    description: str = ""
    meta: dict = field(default_factory=dict)
    """Free-form facts for tests and the zoo (e.g. the injected bug's op and ranks)."""
    backend: str = "torch"
    """``torch`` (traced per rank) or ``jax`` (lowered to StableHLO)."""
    in_specs: Optional[dict] = None
    """JAX: input name -> ``PartitionSpec`` of the distributed program's input (default: replicated)."""
    mesh_axis: str = "tp"
    """JAX: the name of the mesh axis ``distributed`` shards over."""
