"""What libraries need to know while shardproof traces them.

Hugging Face transformers builds attention masks with value-dependent fast paths
(``if (mask == 1).all(): skip the mask``, packed-sequence detection from ``position_ids``):
Python control flow on tensor values, which no trace can record. transformers skips them
when it sees a trace (its ``is_tracing(tensor)``: dynamo, ``torch.jit`` tracing, fx proxies,
fake tensors); shardproof's trace over real tensors is none of those, so during capture it
is told. The skipped branches are pure shortcuts: the mask is then always built (eager) or
``is_causal`` decided from shapes alone (sdpa), which computes the same values.

megatron-core's ``make_viewless_tensor`` frees a view's base by assigning ``.data`` of a fresh
one-element tensor (``out.data = inp.data``), which a trace cannot record (the traced tensor
keeps its one element). It is a memory optimization returning the same values, so during
capture it returns its input.
"""
from __future__ import annotations

import contextlib
import sys

_TRANSFORMERS_MODULES = ("transformers.masking_utils",)
_VIEWLESS = "make_viewless_tensor"


@contextlib.contextmanager
def library_tracing():
    """During one trace, libraries already imported see that a trace is being recorded."""
    patched = []
    for name in _TRANSFORMERS_MODULES:
        module = sys.modules.get(name)
        original = getattr(module, "is_tracing", None)
        if callable(original):
            patched.append((module, original))
            module.is_tracing = _always_tracing
    viewless = [(module, getattr(module, _VIEWLESS)) for name, module in list(sys.modules.items())
                if name.startswith("megatron.core") and callable(getattr(module, _VIEWLESS, None))]
    for module, _ in viewless:
        setattr(module, _VIEWLESS, _same_tensor)
    try:
        yield
    finally:
        for module, original in patched:
            module.is_tracing = original
        for module, original in viewless:
            setattr(module, _VIEWLESS, original)


def _always_tracing(tensor=None) -> bool:
    return True


def _same_tensor(inp, requires_grad=None, keep_graph=None):
    return inp
