"""The op registry: one declaration per op, with everything the tool knows about it.

An :class:`OpDef` holds the op's shape rule, its reference numerics (numpy, float64) and
its relation rule (how the op transforms layouts and terms). Collectives declare rules
over all ranks of a group at once. Adding an op is one ``declare(...)`` call; users can
declare their own ops from a plug-in module the same way.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..algebra.terms import TermStore


@dataclass
class RuleCtx:
    """What a relation rule may look at: the term store, the node being interpreted
    (for its declared output type and argument types), and the rank."""

    terms: TermStore
    node: Any = None
    rank: int = 0
    world_size: int = 1

    def out_shapes(self) -> list[tuple[int, ...]]:
        ty = self.node.type
        return [t.shape for t in ty] if isinstance(ty, tuple) else [ty.shape]


@dataclass
class OpDef:
    name: str
    numerics: Callable[..., Any]
    rule: Callable[..., Any]
    shape: Callable[..., Any] | None = None
    collective: bool = False
    doc: str = ""
    extra: dict = field(default_factory=dict)
    assumes: str = ""  # a convention the rule relies on, listed in every report on a program using the op
    match: Callable[..., Any] | None = None
    """Collectives: ``match(members' args) -> the arguments after the first that the rule
    receives`` (raises :class:`ArgsMismatch` when the members' arguments do not pair up);
    None: every argument after the first must be the same on all members."""
    check: Callable[[Any], str | None] | None = None
    """``check(node)``: None when the rule applies to this node, else the reason it does not
    (a convention that does not hold here); the engine then answers unknown, naming the op."""
    torch_impl: Callable[..., Any] | None = None
    """For ops torch has no kernel for (a plug-in's): the op on torch tensors, which the
    execution confirmation of graph dumps runs (written apart from the numpy numerics)."""
    node_kwargs: Callable[[Any], dict] | None = None
    """``node_kwargs(node)``: keyword arguments the numerics take from the graph node itself
    (the storage layout of an operand), added to the node's own."""


class ArgsMismatch(ValueError):
    """The members of a collective pass arguments that do not pair up."""


REGISTRY: dict[str, OpDef] = {}


def declare(names: str | tuple[str, ...], *, numerics, rule, shape=None, collective=False, doc="",
            assumes: str = "", match=None, check=None, node_kwargs=None, torch_impl=None) -> OpDef:
    names = (names,) if isinstance(names, str) else names
    opdef = OpDef(names[0], numerics, rule, shape, collective, doc, assumes=assumes, match=match, check=check,
                  node_kwargs=node_kwargs, torch_impl=torch_impl)
    for n in names:
        REGISTRY[n] = opdef
    return opdef


POST_RULES: dict[str, list] = {}
"""op name -> functions ``(ctx, value, args, kwargs) -> value`` applied, in order, to what the op's rule
returned (normal forms that need the value's layout, not just its term)."""


def post_rule(*names: str):
    def register(fn):
        for n in names:
            POST_RULES.setdefault(n, []).append(fn)
        return fn
    return register


def apply_rule(opdef: OpDef, ctx: RuleCtx, args, kwargs):
    """The op's rule on resolved arguments, then its post rules."""
    out = opdef.rule(ctx, *args, **kwargs)
    for fn in POST_RULES.get(ctx.node.op if ctx.node is not None else opdef.name, ()):
        out = fn(ctx, out, args, kwargs)
    return out


def failed_check(opdef: OpDef, node) -> str | None:
    """Why the op's rule does not apply to `node` (its declared check), or None."""
    if opdef.check is None:
        return None
    try:
        reason = opdef.check(node)
    except Exception as exc:  # a check that cannot read this node's arguments: the rule does not apply
        reason = f"its check could not be applied ({type(exc).__name__}: {exc})"
    return None if reason is None else f"{node.op}: {reason}"


def run_numerics(opdef: OpDef, node, args, kwargs):
    """The op's numerics on resolved arguments, with what they take from the node."""
    if opdef.node_kwargs is not None:
        kwargs = {**kwargs, **opdef.node_kwargs(node)}
    return opdef.numerics(*args, **kwargs)


def lookup(name: str) -> OpDef | None:
    load_builtin()
    return REGISTRY.get(name)


_loaded = False


def load_builtin() -> None:
    """Register the built-in ops (once). Plug-ins are imported after this, so their
    declarations of a built-in name replace it."""
    global _loaded
    if not _loaded:
        _loaded = True
        from . import aten, aten_attention, aten_backward, aten_index, aten_rows  # noqa: F401
        from . import aten_core, aten_misc, aten_reductions, casts, collectives, frameworks, fsdp, strided, xla  # noqa: F401  (declarations register themselves)
        from . import p2p  # noqa: F401
        from . import aten_dynamic, aten_vision  # noqa: F401
        from . import complex_ops  # noqa: F401
        from . import attention_merge  # noqa: F401
        from . import block_calls  # noqa: F401
        from . import tail_calls  # noqa: F401
        from ..algebra import lemmas, lemmas_rows, masks, normal, padding, picks, sum_pieces  # noqa: F401  (pattern lemmas register themselves)
        from ..algebra import scaling  # noqa: F401  (scale classes, registered as terms are built)
