"""The next step an unknown verdict names: what the user can supply so that the engine
goes on -- a plug-in declaring an op's rule, a relation to state, an expected output."""
from __future__ import annotations

PLUGIN = "--plugin FILE, a module calling shardproof.ops.registry.declare; see examples/plugins/softcap.py"


def for_op(op: str) -> str:
    """An op the engine has no rule for (or whose rule cannot take this node)."""
    return f"next step: declare a rule for {op} in a plug-in ({PLUGIN})"


def unprinted_constants(graphs) -> list[str]:
    """The constants a dump does not print (``self._tensor_constantN``, value None), by name."""
    return list(dict.fromkeys(n.name for g in graphs for n in g.nodes
                              if n.op == "constant" and "value" in n.kwargs and n.kwargs["value"] is None))


def for_unproved(op: str | None = None, unprinted: list[str] | None = None) -> str:
    """Outputs the rules did not prove, the relations stopping at `op` (None: unknown);
    `unprinted`: constants whose values the dump does not print (the first thing to state)."""
    shown = ", ".join(unprinted[:6]) + (f" and {len(unprinted) - 6} more" if len(unprinted or ()) > 6 else "") \
        if unprinted else ""
    values = f"the values of the constants the dump does not print ({shown}: constants: in the relations file), " \
        if unprinted else ""
    rule = f"a plug-in rule for {op} if its rule is too weak ({PLUGIN}), " if op else ""
    return (f"next step: {values}{rule}the relation of an input the inference got wrong (inputs: in the relations "
            f"file), or the relation expected of the output (expect: in the relations file, --expect) when it "
            f"is not to be recoverable")


def for_budget() -> str:
    """A budget (--timeout, --max-memory) ran out before a verdict."""
    return ("next step: a larger budget (--timeout SECONDS, --max-memory SIZE), or a smaller configuration "
            "(fewer ranks, layers or microbatches) that has the same structure")


def for_unconfirmed(detail: str) -> str:
    """A proof that execution did not confirm (`detail`: why it did not run or count)."""
    if "--no-confirm" in detail:
        return "next step: run without --no-confirm, so that execution confirms the proof"
    return ("next step: let execution run where it can: a larger --max-memory (or a machine where the programs "
            "fit), the values a dump elides stated (constants: in the relations file), or input relations that "
            "values can satisfy (inputs: in the relations file)")


def for_breach() -> str:
    """The example inputs break an assumption the proof relies on."""
    return ("next step: example inputs that meet the assumption (random inputs do), or a program that does not "
            "rely on it")


def for_unchained() -> str:
    """Block contracts whose relations do not meet between layers."""
    return ("next step: state the relation each block's input should have (inputs: in the relations file), or "
            "verify the stack as one program, without block contracts")

