"""Command line: a thin shell over :mod:`shardproof.api` and :mod:`shardproof.report`.

Exit codes (contract): 0 verified, 1 violation, 2 unknown, 3 bad input or usage.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import textwrap

EXIT_INPUT = 3

EPILOG = """\
examples:
  shardproof verify examples/tp_mlp.py                  # exit 0: verified
  shardproof verify examples/llama_block.py --world-size 8
  shardproof verify examples/bugs/missing_allreduce.py --json out.json   # exit 1
  shardproof verify my_case.py --relations rel.yaml     # relations from a YAML file

A case file is a Python module defining `case(world_size) -> shardproof.Case` (see README).
exit codes: 0 verified, 1 violation, 2 unknown, 3 bad input or usage.
"""


class UsageError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="shardproof", formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="Prove that a parallelized model computes exactly what its "
                                            "single-device version computes, or show where it does not.",
                                epilog=EPILOG)
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("verify", help="verify a case file", formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog=EPILOG)
    v.add_argument("case", help="Python case file defining case(world_size) -> Case")
    v.add_argument("--world-size", "-n", type=int, help="number of ranks (default: the case's)")
    v.add_argument("--relations", metavar="FILE", help="YAML file of input relations (name or glob -> relation)")
    v.add_argument("--json", metavar="FILE", help="also write the report as JSON ('-' for stdout only)")
    v.add_argument("--verbose", "-v", action="store_true", help="show the input relations even when verified")
    return p


def load_case_module(path: str):
    """Import a case file (user code by design; dumps are parsed elsewhere, never run)."""
    if not os.path.isfile(path):
        raise UsageError(f"case file {path} does not exist")
    here = os.path.dirname(os.path.abspath(path))
    for d in (here, os.path.dirname(here)):  # case files may import their siblings' models
        if d not in sys.path:
            sys.path.insert(0, d)
    name = "shardproof_case_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise UsageError(f"case file {path} is not valid Python: {exc.msg} at line {exc.lineno}") from None
    except Exception as exc:
        raise UsageError(f"case file {path} failed to load: {type(exc).__name__}: {exc}") from None
    if not callable(getattr(module, "case", None)):
        raise UsageError(f"case file {path} defines no case(world_size) function returning a shardproof.Case")
    return module


def _verify(args) -> int:
    from rich.console import Console

    from .api import InputError, verify_case
    from .relations.spec import RelationError
    from .report.terminal import render
    module = load_case_module(args.case)
    try:
        case = module.case(args.world_size) if args.world_size else module.case()
    except Exception as exc:
        raise UsageError(f"case({args.world_size or ''}) in {args.case} failed: {type(exc).__name__}: {exc}") from None
    if args.world_size:
        case.world_size = args.world_size
    to_stdout = args.json == "-"
    console = Console(stderr=to_stdout)
    try:
        status = console.status("capturing", spinner="dots") if console.is_terminal and not to_stdout else None
        if status:
            status.start()
        try:
            report = verify_case(case, relations_file=args.relations,
                                 progress=(lambda msg: status.update(msg)) if status else None)
        finally:
            if status:
                status.stop()
    except (InputError, RelationError) as exc:
        raise UsageError(str(exc)) from None
    if not to_stdout:
        render(report, console, verbose=args.verbose)
    if args.json:
        text = json.dumps(report.to_json(), indent=2, default=str)
        if to_stdout:
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    return report.exit_code


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "verify":
            return _verify(args)
    except UsageError as exc:
        print("shardproof: error: " + textwrap.fill(str(exc), 100, subsequent_indent="  "), file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a shardproof defect: say so plainly, verdict unknown
        if os.environ.get("SHARDPROOF_DEBUG"):
            raise
        print("shardproof: internal error (please report; set SHARDPROOF_DEBUG=1 for the traceback): "
              + textwrap.fill(f"{type(exc).__name__}: {exc}", 100, subsequent_indent="  "), file=sys.stderr)
        return 2
    return EXIT_INPUT


if __name__ == "__main__":
    sys.exit(main())
