"""``shardproof ops``: the op coverage table (op, rule family, numerics source, conventions),
or the core-ATen ops still without a rule."""
from __future__ import annotations

import argparse
import json


def add_parser(sub) -> None:
    o = sub.add_parser("ops", help="list the ops shardproof has rules for (rule, numerics, conventions)",
                       description="List every declared op: the family of its relation rule, where its "
                                   "reference numerics come from (torch's own kernel or numpy) and the "
                                   "conventions its rule relies on (reported whenever a program uses it). "
                                   "Plug-ins given with --plugin are listed too.",
                       epilog="examples:\n  shardproof ops\n  shardproof ops --missing-core\n"
                              "  shardproof ops --json -",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    o.add_argument("--missing-core", action="store_true",
                   help="only the ops of PyTorch's core ATen opset with no rule (nor documented decomposition)")
    o.add_argument("--json", metavar="FILE", help="write the table as JSON ('-' for stdout only)")
    o.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="import a plug-in that declares ops first (repeatable)")


def run(args, load_plugin) -> int:
    from .ops.coverage import core_aten_missing, coverage_rows
    for name in args.plugin:
        load_plugin(name)
    rows, missing = coverage_rows(), core_aten_missing()
    if args.json:
        text = json.dumps({"ops": rows, "core_aten_missing": missing}, indent=2)
        if args.json == "-":
            print(text)
            return 0
        with open(args.json, "w") as f:
            f.write(text + "\n")
    if args.missing_core:
        print("\n".join(missing) if missing is not None else "torch is not installed: the core ATen opset is unknown")
        return 0
    width = max(len(r["op"]) for r in rows)
    print(f"{'op':{width}}  {'rule':12}  {'numerics':28}  conventions")
    for r in rows:
        print(f"{r['op']:{width}}  {r['rule']:12}  {r['numerics']:28}  {r['conventions']}".rstrip())
    if missing is not None:
        print(f"\n{len(rows)} ops declared; {len(missing)} core-ATen ops without a rule "
              f"(shardproof ops --missing-core)")
    return 0
