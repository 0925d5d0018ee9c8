"""Distinguishable values for a live case's weights and inputs.

Relations are inferred by matching values (``relations/infer.py``); a zero bias or any
constant tensor matches every layout, and a loader that hands every rank block 0 of it
is then "proved". Redrawing every parameter and floating buffer of the single-device
program with *distinct* values before the distributed programs are built from it makes
each block of each tensor tell itself apart, so a wrong loader shows.

- :func:`redraw` -- in place, distinct seeded values for a module's parameters (and
  floating buffers); a plain function is left alone.
- :func:`draw_inputs` -- fresh example inputs of the same shapes and dtypes.
- :func:`snapshot` / :func:`restore` -- save and put back a module's parameters and buffers.
"""
from __future__ import annotations

from typing import Any

import torch


def _tensors(program: Any, buffers: bool = True):
    """(name, tensor) for each parameter, then each buffer (when `buffers`), once each."""
    if not isinstance(program, torch.nn.Module):
        return []
    named = list(program.named_parameters())
    if buffers:
        named += list(program.named_buffers())
    return named


def _redrawable(t: torch.Tensor) -> bool:
    return t.is_floating_point() and not t.is_meta and t.numel() > 0 and not hasattr(t, "to_local")


def distinct_values(like: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A tensor shaped and typed like `like` holding distinct values of unit scale in random
    order: a permutation of evenly spaced values, in [-1, 1) when `like` has a negative
    entry and in (0.5, 1.5) otherwise (variances, scales and the like stay positive)."""
    n = like.numel()
    order = torch.randperm(n, generator=generator, dtype=torch.float64)
    unit = (order + 0.5) / n  # distinct, in (0, 1)
    shift = torch.rand((), generator=generator, dtype=torch.float64) / n  # not a fixed grid
    unit = unit + shift * 0.5
    values = 2 * unit - 1 if bool((like.detach() < 0).any()) else unit + 0.5
    return values.reshape(like.shape).to(dtype=like.dtype, device=like.device)


def redraw(program: Any, seed: int, buffers: bool = True) -> None:
    """Give every floating parameter (and floating buffer, when `buffers`) of the module
    `program` distinct random values, in place and deterministically for `seed`. Integer
    and bool buffers are left alone; a plain function is a no-op."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, t in _tensors(program, buffers):
            if _redrawable(t):
                t.copy_(distinct_values(t, generator))


def draw_inputs(inputs: dict, seed: int) -> dict:
    """Fresh example inputs: floating tensors from a standard normal, integer tensors sampled
    from the original tensor's own values (valid indices and markers such as -100 stay
    possible), bool tensors and non-tensors unchanged."""
    generator = torch.Generator().manual_seed(seed)
    drawn = {}
    for name, value in inputs.items():
        if not isinstance(value, torch.Tensor) or value.dtype == torch.bool or value.numel() == 0:
            drawn[name] = value
        elif value.is_floating_point():
            drawn[name] = torch.randn(value.shape, generator=generator, dtype=torch.float64).to(
                dtype=value.dtype, device=value.device)
        elif value.is_complex():
            drawn[name] = value
        else:
            flat = value.detach().reshape(-1)
            pick = torch.randint(0, flat.numel(), value.shape, generator=generator)
            drawn[name] = flat.cpu()[pick].to(value.device)
    return drawn


def snapshot(program: Any) -> dict:
    """Copies of a module's parameters and buffers by name (empty for a plain function)."""
    return {name: t.detach().clone() for name, t in _tensors(program)}


def restore(program: Any, snap: dict) -> None:
    """Put back the values :func:`snapshot` saved."""
    with torch.no_grad():
        for name, t in _tensors(program):
            if name in snap:
                t.copy_(snap[name])
