"""Which registry ops the harness covers, and the known failures it pins."""
from __future__ import annotations

from shardproof.ops.registry import REGISTRY, load_builtin

from . import table_casts, table_core, table_misc, table_reduce, table_views  # noqa: F401  (entries register themselves)
from . import table_vision  # noqa: F401
from . import table_attention  # noqa: F401
from .table import ENTRIES  # noqa: F401  (re-exported)

load_builtin()

# namespaces whose ops have a torch kernel on this machine; the rest are framework or
# vendor ops (xla.*, vllm.*, apex.*, custom_call.*, ...) that torch cannot run here
CHECKED = ("aten.",)
COLLECTIVES = "_c10d_functional."


def declared() -> list[str]:
    return sorted(n for n in REGISTRY if n.startswith(CHECKED))


# op -> reason: failures the harness finds that are not fixed yet (strict xfails: when fixed,
# the xfail fails and must be removed); empty when none is open
XFAIL_NUMERICS: dict[str, str] = {}
XFAIL_RULES: dict[str, str] = {}
