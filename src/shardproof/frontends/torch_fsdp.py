"""Capture of FSDP2 (``torch.distributed.fsdp.fully_shard``) programs.

FSDP2 keeps its own references to each parameter's shard (``FSDPParam``: the padded flat
shard it all-gathers from, and the DTensor parameter registered on the module), so the
usual swap of module parameters for graph inputs does not reach it. Instead each traced
shard is loaded the way FSDP loads a new local tensor (``reset_sharded_param``): padded
along dim 0 to the padded shard size, its narrow view becoming the parameter's local
tensor. Everything FSDP then does (all-gather copy-in, the all-gather, the copy-out into
the unsharded parameters, the gradient reduce-scatter, the accumulation into
``.grad``) is traced as dataflow from those inputs.
"""
from __future__ import annotations

import contextlib
import warnings

import torch


def fsdp_params(module: torch.nn.Module) -> dict:
    """Qualified parameter name -> FSDPParam for every parameter FSDP2 manages in `module`."""
    try:
        from torch.distributed.fsdp._fully_shard._fsdp_state import _get_module_fsdp_state
    except ImportError:
        return {}
    prefixes = {id(m): name for name, m in module.named_modules()}
    found = {}
    for m in module.modules():
        state = _get_module_fsdp_state(m)
        group = getattr(state, "_fsdp_param_group", None) if state is not None else None
        for fp in (group.fsdp_params if group is not None else ()):
            owner = prefixes.get(id(fp._module_info.module))
            if owner is not None:
                found[f"{owner}.{fp._module_info.param_name}" if owner else fp._module_info.param_name] = fp
    return found


def lazy_init(module: torch.nn.Module) -> None:
    """Run FSDP2's root initialisation eagerly (it would otherwise re-pad the shards inside
    the first traced forward, from storage that traced tensors do not have)."""
    from torch.distributed.fsdp._fully_shard._fsdp_state import _get_module_fsdp_state
    state = _get_module_fsdp_state(module)
    if state is not None:
        state._lazy_init()


def load_shard(fsdp_param, local: torch.Tensor) -> None:
    """Make `local` (this rank's unpadded dim-0 chunk) the FSDP parameter's shard, as
    ``FSDPParam.reset_sharded_param`` does for a new local tensor."""
    if fsdp_param.fsdp_placement.dim != 0:
        raise NotImplementedError("FSDP2 capture supports the default Shard(0) placement only")
    padded = local.new_zeros(fsdp_param.padded_sharded_param_size)
    padded.narrow(0, 0, local.size(0)).copy_(local)
    fsdp_param._sharded_param_data = padded.view(-1)
    fsdp_param.sharded_param._local_tensor = padded.narrow(0, 0, local.size(0))


@contextlib.contextmanager
def fsdp_tracing():
    """FSDP2 under ``make_fx`` with functionalization: its storage resizing (freeing the
    unsharded parameters after use, re-allocating before the next all-gather) is memory
    management that traced tensors have no storage for and that changes no value, so it
    is skipped; its out= custom ops are functionalized by ``auto_functionalized`` (v1: the
    op's mutated arguments come back as outputs, whose views functionalization replays).
    FSDP's warning that a module returned a view is about eager in-place use and is an
    artefact of tracing here (functional tensors are views of their values)."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param
    import torch._inductor.config as inductor_config
    saved = _fsdp_param.alloc_storage, _fsdp_param.free_storage, inductor_config.enable_auto_functionalized_v2
    _fsdp_param.alloc_storage = _fsdp_param.free_storage = lambda tensor: None
    inductor_config.enable_auto_functionalized_v2 = False
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
            yield
    finally:
        _fsdp_param.alloc_storage, _fsdp_param.free_storage, inductor_config.enable_auto_functionalized_v2 = saved
