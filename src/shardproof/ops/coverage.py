"""Which ops the registry covers, and how: one row per declared op (its rule's family, where
its numerics come from, the conventions it relies on), and the ops of PyTorch's core ATen
opset (``torch.Tag.core``) that have no rule and no documented decomposition."""
from __future__ import annotations

from .registry import REGISTRY, load_builtin

# core-ATen ops covered by a decomposition into ruled ops rather than a rule of their own:
# op -> what it decomposes into (documented here so the coverage test counts it)
# (the capture applies torch's table to every op without a rule: frontends/torch_decomp.py)
DECOMPOSED: dict[str, str] = {
    "aten.select_scatter": "arange, eq, unsqueeze, expand, view and where (torch._decomp)",
    "aten.upsample_nearest2d": "arange, mul, add, _to_copy, unsqueeze and index (torch._decomp)",
}

# core-ATen ops whose rule answers unknown by design (a declared check gives the reason; never a
# crash): data-dependent values and symbolic sizes (ops/aten_dynamic.py). sym_* never appear as
# compute nodes in a live capture (traced with concrete shapes); graphs with dynamic shapes can hold them.
UNKNOWN_BY_DESIGN: dict[str, str] = {
    "aten._local_scalar_dense": "a tensor's value read as a Python number (.item()): data-dependent",
    "aten.resize_": "storage resized in place (uninitialized elements); to its own size it is the identity",
    "aten.sym_size": "symbolic size (dynamic shapes)",
    "aten.sym_numel": "symbolic size (dynamic shapes)",
    "aten.sym_stride": "symbolic stride (dynamic shapes)",
    "aten.sym_storage_offset": "symbolic storage offset (dynamic shapes)",
    "aten.sym_is_contiguous": "symbolic layout query (dynamic shapes)",
}


def _family(opdef) -> str:
    if opdef.collective:
        return "collective"
    module = getattr(opdef.rule, "__module__", "") or ""
    family = module.rsplit(".", 1)[-1] or "plug-in"
    return {"common": "elementwise"}.get(family, family)


def coverage_rows() -> list[dict]:
    """{op, rule, numerics, conventions, doc} for every declared op, sorted by name."""
    load_builtin()
    rows = []
    for name in sorted(REGISTRY):
        opdef = REGISTRY[name]
        conventions = [c for c in (opdef.assumes, "checked per node" if opdef.check else "") if c]
        rows.append({"op": name, "rule": _family(opdef),
                     "numerics": getattr(opdef.numerics, "source", "numpy"),
                     "conventions": "; ".join(conventions), "doc": opdef.doc})
    return rows


def core_aten_ops() -> list[str] | None:
    """``aten.<name>`` for every op packet with an overload tagged core; None without torch."""
    try:
        import torch
    except ImportError:
        return None
    names = set()
    # every registered schema (``dir(torch.ops.aten)`` lists only the packets loaded so far)
    packets = {n.split("::", 1)[1].split(".", 1)[0] for n in torch._C._dispatch_get_all_op_names()
               if n.startswith("aten::")}
    for name in packets:
        try:
            packet = getattr(torch.ops.aten, name)
            overloads = packet.overloads()
        except (AttributeError, RuntimeError):
            continue
        if any(torch.Tag.core in getattr(packet, o).tags for o in overloads):
            names.add("aten." + name)
    return sorted(names)


def core_aten_missing() -> list[str] | None:
    """Core-ATen ops with neither a rule nor a documented decomposition; None without torch."""
    load_builtin()
    core = core_aten_ops()
    if core is None:
        return None
    return [op for op in core if op not in REGISTRY and op not in DECOMPOSED]
