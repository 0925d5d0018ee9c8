"""Command line: a thin shell over :mod:`shardproof.api` and :mod:`shardproof.report`.

Exit codes (contract): 0 verified, 1 violation, 2 unknown, 3 bad input or usage, 4 internal
error. Several runs (case files, a directory, a ``-n 2,4,8`` sweep) exit with the worst
code in the order 0 < 2 < 1 < 3 < 4 (:data:`shardproof.report.summary.EXIT_ORDER`).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
import textwrap
import time

from . import cli_ops
from .cli_args import (WORLD_ONE_NOTE, UsageError, case_files, check_case, check_output_path, check_timeout,
                       check_world_size, memory_size, world_sizes)
from .engine.budget import stage as budget_stage
from .frontends.user_frame import user_location

EXIT_INPUT = 3
EXIT_INTERNAL = 4

EPILOG = """\
examples:
  shardproof verify src/shardproof/zoo/tp_mlp.py                  # exit 0: verified
  shardproof verify src/shardproof/zoo/llama_block.py --world-size 8
  shardproof verify src/shardproof/zoo/bugs/missing_allreduce.py --json out.json   # exit 1
  shardproof verify src/shardproof/zoo/bugs/missing_allreduce.py --html report.html  # the graphs, side by side
  shardproof verify my_case.py --relations rel.yaml     # relations from a YAML file
  shardproof verify src/shardproof/zoo/tp_mlp.py -n 2,4,8          # a sweep: one verdict per world size
  shardproof verify cases/ other_case.py -q                # every case file of a directory; verdict lines only
  shardproof verify my_case.py --timeout 600 --max-memory 8G   # over budget: unknown, naming where it stopped

  # graph dumps (print_readable() text or XLA HLO text; read, never executed):
  shardproof verify --seq dumps/tp1 --dist dumps/tp2 --auto-relations --expect 'loss=Replicate()'
  shardproof verify --seq one_step/fw.g0.r0.py --dist two_steps/fw.g0.r0.py \\
      --relations examples/dumps/grad_accumulation.yaml --json -
  shardproof verify --seq tp1 --dist tp2 --kind bw --relations rel.yaml --expect "add_3=Replicate() of add_1"
  shardproof verify --seq s.py --dist d --auto-relations --plugin examples/plugins/softcap.py

A case file is a Python module defining `case(world_size) -> shardproof.Case` (see README).
--seq is one dump file (or a directory with one rank); --dist a directory of per-rank
<kind>.g<N>.r<rank>.py files, or the files. An HLO module (a file starting with
'HloModule', or a directory holding one *.hlo file) is one SPMD program run by every rank. A relations file has sections inputs:, expect:
and constants: (see README). --plugin imports a module declaring your own ops first.
exit codes: 0 verified, 1 violation, 2 unknown, 3 bad input or usage, 4 internal error (please
report it; SHARDPROOF_DEBUG=1 prints the traceback). Several runs (case files, a directory, a
-n sweep) print a summary table and exit with the worst code: 0 < 2 < 1 < 3 < 4.
-n 1 is allowed, but proves nothing about sharding (the report says so). NO_COLOR=1 turns colour off.
"""


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message):  # usage errors exit 3 (argparse's own 2 means "unknown" here)
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(EXIT_INPUT)


def _parser() -> argparse.ArgumentParser:
    p = _ArgumentParser(prog="shardproof", formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="Prove that a parallelized model computes exactly what its "
                                            "single-device version computes, or show where it does not.",
                                epilog=EPILOG)
    from . import __version__
    p.add_argument("--version", action="version", version=f"shardproof {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("verify", help="verify a case file, or single-device and distributed graph dumps",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    v.add_argument("case", nargs="*", help="Python case files defining case(world_size) -> Case, or directories "
                                           "of them (several: a summary table, the worst exit code)")
    v.add_argument("--world-size", "-n", type=world_sizes, metavar="N[,N...]",
                   help="number of ranks (default: the case's; for an HLO module, the ranks its replica groups "
                        "name); a list (2,4,8) sweeps, one verdict per world size. 1..1024, and one of the "
                        "case's WORLD_SIZES where it declares them")
    dumps = v.add_argument_group("graph dumps")
    dumps.add_argument("--seq", metavar="PATH", help="the single-device dump (a file, or a directory with one rank)")
    dumps.add_argument("--dist", metavar="PATH", nargs="+",
                       help="the distributed dumps: a directory of per-rank files, or the files")
    dumps.add_argument("--auto-relations", action="store_true",
                       help="relate inputs the relations file does not name by name and shape (prints the table)")
    dumps.add_argument("--expect", metavar="NAME=RELATION", action="append", default=[],
                       help="expected relation of an output (repeatable); 'NAME=R of SEQ_NAME' when the "
                            "single-device output has another name. Default: every output recoverable")
    dumps.add_argument("--kind", metavar="fw|bw|both", help="which graph of the dump directories to verify")
    dumps.add_argument("--graph", metavar="gN", help="which of several <kind>.g<N>.r<rank>.py graphs to verify (g1)")
    dumps.add_argument("--symbols", metavar="NAME=INT[,NAME=INT]", action="append", default=[],
                       help="sizes of symbolic dims in the dumps (u0 of a data-dependent size); repeatable; "
                            "over the relations file's symbols: section")
    dumps.add_argument("--allow-partial-outputs", metavar="NAME", nargs="*", default=None,
                       help="outputs (names or globs; none: all) that may be partial sums across the ranks, "
                            "completed by a reduction outside the graph (DDP's or Megatron's gradient reduction): "
                            "verified up to that reduction; otherwise a partial output is unknown")
    v.add_argument("--relations", metavar="FILE",
                   help="YAML relations file (sections inputs:, expect:, constants:, symbols:)")
    v.add_argument("--plugin", metavar="MODULE_OR_FILE", action="append", default=[],
                   help="import a module that declares ops (shardproof.ops.registry.declare) first; repeatable")
    v.add_argument("--json", metavar="FILE", help="also write the report as JSON ('-' for stdout only)")
    v.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page: the single-device graph "
                                                  "beside each rank's, nodes coloured by relation, the finding marked")
    v.add_argument("--verbose", "-v", action="store_true", help="show the input relations even when verified")
    v.add_argument("--quiet", "-q", action="count", default=0,
                   help="-q: the verdict line of each run only (and the summary of several); -qq: nothing, the "
                        "exit code says it (errors still go to stderr)")
    v.add_argument("--timeout", metavar="SECONDS", type=float,
                   help="time budget of each run: past it the verdict is unknown, naming the stage and node where "
                        "it stopped (checked between stages and between interpreted nodes)")
    v.add_argument("--capture-workers", metavar="K", type=int,
                   help="capture a live case's ranks on K forked processes (0: one per CPU; default 1)")
    _executor_arguments(v, "a live case's ranks are captured")
    v.add_argument("--no-symmetry", action="store_true",
                   help="trace every rank of a training case (by default ranks whose programs are one program up "
                        "to their process groups are traced once per class, the others derived)")
    v.add_argument("--max-memory", metavar="SIZE",
                   help="peak memory (RSS) budget of the process, e.g. 2G or 512M: above it the verdict is unknown, "
                        "naming where it stopped")
    v.add_argument("--save-counterexample", metavar="DIR",
                   help="on a violation, save inputs on which the programs really differ (npz) and DIR/replay.py, "
                        "which runs both programs on them (gloo, CPU) and prints the difference (case files only)")
    v.add_argument("--confirm-draws", metavar="N", type=int, default=None,
                   help="confirm a proof by running the programs on their own values and N fresh random draws "
                        "(default 2); verified needs the execution to agree")
    v.add_argument("--no-confirm", action="store_true",
                   help="do not run the programs: the best verdict is then unknown (proved, not confirmed)")
    v.add_argument("--no-fix", action="store_true",
                   help="do not search for a proved fix of a violation (the search re-verifies repaired programs "
                        "for up to 30 s)")
    v.add_argument("--no-temporal", action="store_true",
                   help="skip the temporal checks of a live case (an async result read before wait(), a buffer "
                        "reused while an op is in flight, collectives in different orders, deadlock); they run "
                        "each rank's program once more, eagerly")
    z = sub.add_parser("zoo", help="run the bundled catalogue of correct models and injected bugs",
                       description="Verify every case of the zoo (src/shardproof/zoo: correct models, injected bugs, "
                                   "gaps) and compare each verdict and first finding with what the case's meta "
                                   "expects. Exit 1 if any case is not as expected.",
                       epilog="examples:\n  shardproof zoo --list\n  shardproof zoo -k bugs/\n"
                              "  shardproof zoo -k '*attention*' --json zoo.json",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    z.add_argument("-k", dest="pattern", metavar="PATTERN", help="only cases whose name contains or matches PATTERN")
    z.add_argument("--list", action="store_true", help="list the cases, their source and expectation; run nothing")
    z.add_argument("--json", metavar="FILE", help="also write the results as JSON ('-' for stdout only)")
    _executor_arguments(z, "the cases run (one unit per case)")
    m = sub.add_parser("mutants", help="mutation testing: inject bugs into correct cases' distributed graphs and "
                                       "check every mutant is caught or genuinely equivalent",
                       description="Capture each (correct) case, mutate its distributed graphs (drop, duplicate, "
                                   "reorder or regroup a collective, change its reduce op, shift a slice, change a "
                                   "constant, scale a tensor, swap inputs or ranks) and verify every mutant. Exit 1 "
                                   "if a mutant survives: verified, yet numerically different (unsound rules).",
                       epilog="example:\n  shardproof mutants examples/*.py --json mutants.json",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    m.add_argument("cases", nargs="+", metavar="CASE", help="Python case files of correct programs")
    m.add_argument("--world-size", "-n", type=int, help="number of ranks (default: each case's; 1..1024)")
    m.add_argument("--operator", action="append", default=[], metavar="NAME",
                   help="only this mutation operator (repeatable); default: all")
    m.add_argument("--json", metavar="FILE", help="also write every mutant's outcome as JSON ('-' for stdout only)")
    _executor_arguments(m, "the mutants are judged (default: local)")
    cli_ops.add_parser(sub)
    return p


def _import_file(path: str, what: str):
    """Import a user's Python file (user code by design; dumps are parsed elsewhere, never run)."""
    if os.path.isdir(path):
        raise UsageError(f"{what} {path} is a directory; give a .py file")
    if not os.path.isfile(path):
        raise UsageError(f"{what} {path} does not exist")
    here = os.path.dirname(os.path.abspath(path))
    parent = os.path.dirname(here)
    for d in (here, parent, os.path.dirname(parent)):  # user files may import their (parents') siblings
        if d not in sys.path:
            sys.path.insert(0, d)
    name = "shardproof_user_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise UsageError(f"{what} {path} is not valid Python: {exc.msg} at line {exc.lineno}") from None
    except Exception as exc:
        raise UsageError(f"{what} {path} failed to load: {type(exc).__name__}: {exc}{user_location(exc)}") from None
    return module


def _executor_arguments(parser, what: str) -> None:
    """--executor, --address, --workers (engine/executor.py): where the units of work run."""
    parser.add_argument("--executor", choices=("serial", "local", "ray"),
                        help=f"where {what}: serial (this process), local (a pool of forked processes) or ray "
                             f"(a Ray cluster: --address, else a local Ray instance on loopback); the results are "
                             f"the same, a report's stats.timings say where each unit ran")
    parser.add_argument("--address", metavar="ADDR", help="--executor ray: the cluster's address (host:port, "
                                                           "ray://..., auto); 'local' or none: start a Ray instance here")
    parser.add_argument("--workers", metavar="N", type=int,
                        help="--executor local: processes (0 or default: one per CPU); ray: CPUs used")


def load_case_module(path: str):
    module = _import_file(path, "case file")
    if not callable(getattr(module, "case", None)):
        raise UsageError(f"case file {path} defines no case(world_size) function returning a shardproof.Case")
    return module


def load_plugin(name: str) -> None:
    """Import a plug-in (a file path or a module name); its ``declare(...)`` calls register ops."""
    from .ops.registry import load_builtin
    load_builtin()  # first, so that a plug-in may also replace a built-in op
    if name.endswith(".py") or os.sep in name:
        _import_file(name, "plugin")
        return
    try:
        importlib.import_module(name)
    except Exception as exc:
        raise UsageError(f"plugin {name} failed to import: {type(exc).__name__}: {exc}") from None


def _expectations(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, rel = item.partition("=")
        if not sep or not name.strip() or not rel.strip():
            raise UsageError(f"--expect {item!r}: expected NAME=RELATION, e.g. --expect 'loss=Replicate()'")
        out[name.strip()] = rel.strip()
    return out


def _symbols(items: list[str]) -> dict[str, int]:
    out = {}
    for item in (part for i in items for part in i.split(",")):
        name, sep, value = (x.strip() for x in item.partition("="))
        if not sep or not name.isidentifier() or not value.lstrip("-").isdigit():
            raise UsageError(f"--symbols {item!r}: expected NAME=INT, e.g. --symbols u0=8")
        out[name] = int(value)
    return out


def _check_form(args) -> None:
    """The arguments make sense together and every output path is writable: checked before any work."""
    check_output_path(args.json, "--json")
    check_output_path(args.html, "--html")
    check_timeout(args.timeout)
    args.max_bytes = memory_size(args.max_memory) if args.max_memory is not None else None
    for n in args.world_size or []:
        check_world_size(n)
    dumps = args.seq is not None or args.dist is not None
    if dumps and args.case:
        raise UsageError("give either a case file or --seq and --dist, not both")
    if dumps and (args.seq is None or args.dist is None):
        raise UsageError("graph dumps need both --seq (the single-device dump) and --dist (the distributed dumps)")
    if not dumps and not args.case:
        raise UsageError("give a case file, or --seq and --dist (see shardproof verify --help)")
    if not dumps and (args.auto_relations or args.expect or args.kind or args.graph or args.symbols
                      or args.allow_partial_outputs is not None):
        raise UsageError("--auto-relations, --expect, --kind, --graph and --symbols apply to graph dumps "
                         "(--seq/--dist)")
    _symbols(args.symbols)


def _plan(args) -> list[tuple]:
    """The runs, each (case file or None for dumps, world size or None, module), validated
    before any capture: every case file loads and every world size is one it allows."""
    sizes = args.world_size or [None]
    if args.seq is not None:
        return [(None, n, None) for n in sizes]
    runs = []
    for path in case_files(args.case):
        module = load_case_module(path)
        declared = getattr(module, "WORLD_SIZES", None)
        for n in sizes:
            if n is not None:
                check_world_size(n, path, declared if isinstance(declared, (tuple, list, range)) else None)
            runs.append((path, n, module))
    return runs


def _run(args, path, n, module, progress):
    from . import api
    saved, api.TEMPORAL = api.TEMPORAL, not args.no_temporal  # for this run only
    symmetry, api.SYMMETRY = api.SYMMETRY, not getattr(args, "no_symmetry", False)
    try:
        return _run_case(args, path, n, module, progress)
    finally:
        api.TEMPORAL, api.SYMMETRY = saved, symmetry


def _run_case(args, path, n, module, progress):
    from .api import verify_case, verify_dumps
    views = bool(args.html)
    if path is None:
        return verify_dumps(args.seq, args.dist[0] if len(args.dist) == 1 else args.dist,
                            relations_file=args.relations, auto_relations=args.auto_relations,
                            expect=_expectations(args.expect), kind=args.kind, progress=progress, views=views,
                            world_size=n, confirm_draws=_confirm_draws(args), symbols=_symbols(args.symbols),
                            graph=args.graph, fixes=not args.no_fix,
                            allow_partial_outputs=None if args.allow_partial_outputs is None
                            else (args.allow_partial_outputs or ["*"]))
    call = f"case({n or ''})"
    try:
        case = module.case(n) if n else module.case()
    except Exception as exc:
        raise UsageError(f"{call} in {path} failed: {type(exc).__name__}: {exc}{user_location(exc)}") from None
    check_case(case, path, call)
    if n:
        case.world_size = n
    else:
        check_world_size(case.world_size, path)
    args.run_world = case.world_size  # for a report cut short by the budget
    return verify_case(case, relations_file=args.relations, progress=progress, views=views,
                       confirm_draws=_confirm_draws(args), fixes=not args.no_fix)


def _tracked(bar):
    """The progress callback: each stage is checked against the budget, then drawn."""
    def progress(stage: str, done: int, total: int) -> None:
        budget_stage(stage)
        if bar is not None:
            bar(stage, done, total)
    return progress


def _confirm_draws(args) -> int | None:
    from .api import NO_CONFIRM
    if args.no_confirm:
        return NO_CONFIRM
    if args.confirm_draws is not None and args.confirm_draws < 0:
        raise UsageError(f"--confirm-draws {args.confirm_draws}: give 0 or more (--no-confirm skips the execution)")
    return args.confirm_draws


def _verify(args) -> int:
    _check_form(args)
    if args.capture_workers is not None:
        from .frontends import rank_pool
        rank_pool.CAPTURE_WORKERS = max(0, args.capture_workers)
    if args.save_counterexample and not args.case:
        raise UsageError("--save-counterexample replays case files (a graph dump is never executed)")
    if args.save_counterexample and os.path.exists(args.save_counterexample) and not os.path.isdir(args.save_counterexample):
        raise UsageError(f"--save-counterexample {args.save_counterexample}: exists and is not a directory")
    for plugin in args.plugin:
        load_plugin(plugin)
    with _executor(args):
        return _verify_runs(args)


def _executor(args, default: str | None = None):
    """The run's executor (--executor, --address, --workers; engine/executor.py); without
    --executor, `default` (a command whose units pay on a pool) or a no-op."""
    import contextlib

    from .engine import executor as ex
    if args.executor is None and default is not None and args.address is None:
        return ex.using(ex.make(default, None, args.workers))
    if args.executor is None:
        if args.address is not None or args.workers is not None:
            raise UsageError("--address and --workers choose where --executor runs: give --executor too")
        return contextlib.nullcontext()
    if args.address is not None and args.executor != "ray":
        raise UsageError(f"--address is a Ray cluster's: it applies to --executor ray, not {args.executor}")
    try:
        return ex.using(ex.make(args.executor, args.address, args.workers))
    except ex.ExecutorError as exc:
        raise UsageError(str(exc)) from None


def _verify_runs(args) -> int:
    from rich.console import Console

    from .report.summary import render_summary, summary_json
    runs = _plan(args)
    if len(runs) > 1 and args.html:
        raise UsageError("--html draws one run: give one case file and one world size")
    if len(runs) > 1 and args.save_counterexample:
        raise UsageError("--save-counterexample saves one run's inputs: give one case file and one world size")
    to_stdout = args.json == "-"
    console = Console(stderr=to_stdout, quiet=args.quiet >= 2)
    if len(runs) == 1:
        report = _verify_one(args, *runs[0], console)
        _emit_json(args.json, report.to_json())
        return report.exit_code
    rows = []
    for path, n, module in runs:
        label = path or "dumps"
        try:
            rows.append((label, n, _verify_one(args, path, n, module, console)))
        except UsageError as exc:  # one bad case among several: said, counted, the others still run
            _say_error(str(exc))
            rows.append((label, n, str(exc)))
    if not to_stdout:
        render_summary(rows, console)
    data = summary_json(rows)
    _emit_json(args.json, data)
    return data["exit_code"]


def _verify_one(args, path, n, module, console):
    from .api import InputError
    from .engine.budget import BudgetExceeded, budget
    from .engine.next_step import for_budget
    from .engine.result import Report
    from .frontends.fx_text import DumpError
    from .relations.spec import RelationError
    from .report.progress import progress_bar
    from .report.terminal import render, verdict_line
    to_stdout = args.json == "-"
    t0 = time.perf_counter()
    try:
        with budget(args.timeout, args.max_bytes), \
                progress_bar(console, enabled=not to_stdout and not args.quiet) as bar:
            report = _run(args, path, n, module, _tracked(bar))
    except (InputError, RelationError, DumpError) as exc:
        raise UsageError(str(exc)) from None
    except BudgetExceeded as exc:
        name = os.path.splitext(os.path.basename(path))[0] if path else "dumps"
        report = Report("unknown", n or getattr(args, "run_world", 0) or 0, name=name,
                        reason=f"stopped: {exc}; nothing was proved; {for_budget()}", stats={})
        report.stats["wall_seconds"] = round(time.perf_counter() - t0, 4)
    if report.world_size == 1:
        report.reason = WORLD_ONE_NOTE + (f"; {report.reason}" if report.reason else "")
    if not to_stdout and args.quiet == 1:
        console.print(verdict_line(report))
    elif not to_stdout:
        render(report, console, verbose=args.verbose or args.auto_relations)
    if args.html:
        from .report.html import render_html
        _write(args.html, render_html(report))
        if not to_stdout and not args.quiet:
            console.print(f"HTML report: {args.html}", style="dim", highlight=False, soft_wrap=True)
    if args.save_counterexample:
        _save_counterexample(args, report, path, n, console, to_stdout or args.quiet)
    return report


def _save_counterexample(args, report, path, n, console, quiet: bool) -> None:
    """``--save-counterexample DIR``: a violation's inputs and DIR/replay.py."""
    from .api import InputError, save_counterexample
    if report.status != "violation":
        if not quiet:
            console.print(f"no counterexample to save: the verdict is {report.status}", style="dim")
        return
    try:
        script = save_counterexample(report, path, args.save_counterexample, n)
    except (InputError, OSError) as exc:  # the verdict stands (its exit code is kept); say why nothing was saved
        print(f"shardproof: error: no counterexample saved: {exc}", file=sys.stderr)
        return
    if not quiet:
        console.print(f"counterexample saved: python {script}", style="dim", highlight=False, soft_wrap=True)


def _zoo(args) -> int:
    from rich.console import Console

    from .api import run_zoo_case
    from .report.progress import progress_bar
    from .report.zoo import render_zoo, zoo_json
    from .zoo import catalogue, entry_name, expectation, selected
    paths = selected(catalogue(), args.pattern)
    if not paths:
        raise UsageError(f"no zoo case matches {args.pattern!r} (see shardproof zoo --list)")
    to_stdout = args.json == "-"
    console = Console(stderr=to_stdout)
    results = []
    with _executor(args) as run:
        if run is not None and not args.list:  # the cases on the executor, each in one worker
            with progress_bar(console, enabled=not to_stdout) as progress:
                results = run.map(_zoo_case, paths, "zoo", [entry_name(p) for p in paths],
                                  lambda i: progress and progress(f"{entry_name(paths[i])} (submitted)", i, len(paths)))
        for path in paths if run is None or args.list else []:
            case = load_case_module(path).case()
            if args.list:
                console.print(f"{entry_name(path):44} {expectation(case.meta, case.world_size).verdict:10} "
                              f"{case.meta.get('source', '')}", highlight=False, soft_wrap=True)
                continue
            with progress_bar(console, enabled=not to_stdout) as progress:
                results.append(run_zoo_case(case, entry_name(path), progress))
    if args.list:
        return 0
    if not to_stdout:
        render_zoo(results, console)
    _emit_json(args.json, zoo_json(results))
    return 0 if all(r.ok for r in results) else 1


def _zoo_case(path: str):
    """One zoo case, loaded and run where the executor runs it."""
    from .api import run_zoo_case
    from .zoo import entry_name
    return run_zoo_case(load_case_module(path).case(), entry_name(path))


def _mutants(args) -> int:
    from rich.console import Console

    from .api import InputError, mutation_test
    from .engine.mutants import OPERATORS
    from .report.mutants import mutants_json, render_mutants
    unknown = [o for o in args.operator if o not in OPERATORS]
    if unknown:
        raise UsageError(f"unknown mutation operator(s) {', '.join(unknown)}; known: {', '.join(OPERATORS)}")
    from .report.progress import progress_bar
    to_stdout = args.json == "-"
    console = Console(stderr=to_stdout)
    results = {}
    if args.world_size is not None:
        check_world_size(args.world_size)
    with _executor(args, default="local"):  # mutants are whole proofs: a pool pays even on 2 cores (bench/README.md)
        for path in args.cases:
            module = load_case_module(path)
            case = module.case(args.world_size) if args.world_size else module.case()
            check_case(case, path, "case()")
            name = case.name or os.path.splitext(os.path.basename(path))[0]
            try:
                with progress_bar(console, enabled=not to_stdout) as progress:
                    results[name] = mutation_test(case, args.world_size, args.operator or None, progress)
            except InputError as exc:
                raise UsageError(f"{path}: {exc}") from None
    if not to_stdout:
        render_mutants(results, console)
    _emit_json(args.json, mutants_json(results))
    return 1 if any(o.outcome == "survived" for outs in results.values() for o in outs) else 0


def _emit_json(target: str | None, data) -> None:
    """``--json FILE`` writes `data` there; ``--json -`` prints it (and nothing else) on stdout."""
    if not target:
        return
    text = json.dumps(data, indent=2, default=str)
    if target == "-":
        print(text)
    else:
        _write(target, text + "\n")


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None


def _say_error(message: str) -> None:
    """One paragraph on stderr; a message that breaks its own lines (PyYAML's caret) keeps them."""
    text = message if "\n" in message else textwrap.fill(message, 100, subsequent_indent="  ",
                                                          break_on_hyphens=False, break_long_words=False)
    print("shardproof: error: " + text, file=sys.stderr)


def _error_object(args, message: str, code: int) -> None:
    """``--json -``: an error still prints a JSON object on stdout."""
    if getattr(args, "json", None) == "-":
        from .engine.result import SCHEMA_VERSION
        print(json.dumps({"schema_version": SCHEMA_VERSION, "status": "error", "message": message,
                          "exit_code": code}, indent=2))


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "verify":
            return _verify(args)
        if args.command == "mutants":
            return _mutants(args)
        if args.command == "zoo":
            return _zoo(args)
        if args.command == "ops":
            return cli_ops.run(args, load_plugin)
    except UsageError as exc:
        _say_error(str(exc))
        _error_object(args, str(exc), EXIT_INPUT)
        return EXIT_INPUT
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a shardproof defect: say so plainly, in one paragraph
        debug = os.environ.get("SHARDPROOF_DEBUG") == "1"
        if debug:
            import traceback
            traceback.print_exc()
        what = f"{type(exc).__name__}: {exc}"
        print(textwrap.fill(f"shardproof: internal error: {what}. This is a defect of shardproof, not of your "
                            f"program: please report it with the command line"
                            + (" and the traceback above." if debug else
                               " (SHARDPROOF_DEBUG=1 prints the traceback)."), 100, subsequent_indent="  "),
              file=sys.stderr)
        _error_object(args, f"internal error: {what}", EXIT_INTERNAL)
        return EXIT_INTERNAL
    return EXIT_INPUT


if __name__ == "__main__":
    sys.exit(main())
