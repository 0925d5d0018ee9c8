"""A verification case: the single-device program, the per-rank program, example inputs.

Case files are ordinary Python modules that define ``case(world_size=2) -> Case``.
Programs are PyTorch modules or functions called with the inputs as keyword arguments;
a module's parameters and buffers are inputs too, named as in ``named_parameters()``.
Torch is only needed to *capture* a case; everything after capture is torch-free.

With ``backend="jax"`` the programs are JAX functions (see
:mod:`shardproof.frontends.jax_lower`): ``single`` takes the inputs positionally,
``distributed(mesh)`` returns the ``shard_map`` program over a 1-D mesh with axis
``mesh_axis``, and ``in_specs`` gives each input's ``PartitionSpec``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional


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
    """Output name -> expected relation; default: each output recoverable from the ranks."""
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
