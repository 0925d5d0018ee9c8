"""The next step an unknown verdict names: what the user can supply so that the engine
goes on -- a plug-in declaring an op's rule, a relation to state, an expected output."""
from __future__ import annotations

PLUGIN = "--plugin FILE, a module calling shardproof.ops.registry.declare; see examples/plugins/softcap.py"


def for_op(op: str) -> str:
    """An op the engine has no rule for (or whose rule cannot take this node)."""
    return f"next step: declare a rule for {op} in a plug-in ({PLUGIN})"


def for_unproved(op: str | None = None) -> str:
    """Outputs the rules did not prove, the relations stopping at `op` (None: unknown)."""
    rule = f"a plug-in rule for {op} if its rule is too weak ({PLUGIN}), " if op else ""
    return (f"next step: {rule}the relation of an input the inference got wrong (inputs: in the relations "
            f"file), or the relation expected of the output (expect: in the relations file, --expect) when it "
            f"is not to be recoverable")
