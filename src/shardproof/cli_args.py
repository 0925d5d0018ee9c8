"""Argument and input validation for the command line, done before any capture: world
sizes, budgets, output paths, case files and directories, what ``case()`` returned."""
from __future__ import annotations

import os
import re

MAX_WORLD_SIZE = 1024
"""The largest world size accepted (a case may declare fewer: ``WORLD_SIZES``)."""

WORLD_ONE_NOTE = ("world size 1: one rank holds every tensor whole and no collective crosses ranks, so nothing "
                  "about sharding or communication was proved (only that the distributed program, run alone, "
                  "computes the single-device result)")


class UsageError(Exception):
    """Bad input or usage: exit code 3, one paragraph."""


def world_sizes(text: str) -> list[int]:
    """``-n 4`` or a sweep ``-n 2,4,8`` (argparse type; the bounds are checked later,
    so that ``--json -`` can report them as an error object)."""
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        import argparse
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of ranks or a comma-separated list "
                                         f"(e.g. 4 or 2,4,8)") from None
    return sizes


def check_world_size(n: int, where: str = "", declared=None) -> None:
    """`n` ranks are possible: 1..MAX_WORLD_SIZE, and one of the case's declared
    ``WORLD_SIZES`` if it declares them (1 is always allowed; see WORLD_ONE_NOTE)."""
    of = f" for {where}" if where else ""
    if n < 1:
        raise UsageError(f"--world-size {n}{of}: the number of ranks must be at least 1 (2 or more to prove "
                         f"anything about sharding)")
    if n > MAX_WORLD_SIZE:
        raise UsageError(f"--world-size {n}{of}: at most {MAX_WORLD_SIZE} ranks are supported (each rank is "
                         f"traced and interpreted separately)")
    if declared and n != 1 and n not in tuple(declared):
        raise UsageError(f"--world-size {n}{of}: the case declares the world sizes it is built for, "
                         f"WORLD_SIZES = {tuple(declared)}; pick one of them")


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def memory_size(text: str) -> int:
    """``--max-memory``: bytes from ``2G``, ``512M``, ``1.5GiB``, ``4096`` (bytes)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([KMGT]?)(?:i?B)?\s*", str(text), re.IGNORECASE)
    if not m or float(m.group(1)) <= 0:
        raise UsageError(f"--max-memory {text!r}: expected a size such as 2G, 512M or 1.5GiB")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def check_timeout(seconds: float | None) -> None:
    if seconds is not None and not seconds > 0:
        raise UsageError(f"--timeout {seconds:g}: give a positive number of seconds")


def check_output_path(path: str | None, option: str) -> None:
    """An output file must be writable before any work is done (``-``: stdout)."""
    if not path or path == "-":
        return
    if os.path.isdir(path):
        raise UsageError(f"{option} {path}: is a directory; give a file name")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{option} {path}: cannot write there, directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise UsageError(f"{option} {path}: cannot write there (permission denied)")


def case_files(paths: list[str]) -> list[str]:
    """Case files from the command line: a file is itself; a directory gives its ``*.py``
    files that define ``case(`` (sorted; names starting with ``_`` skipped)."""
    out = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(os.path.join(path, f) for f in os.listdir(path)
                           if f.endswith(".py") and not f.startswith("_") and _defines_case(os.path.join(path, f)))
            if not found:
                raise UsageError(f"directory {path} holds no case files (*.py files defining case(world_size))")
            out.extend(found)
        elif not os.path.exists(path):
            raise UsageError(f"case file {path} does not exist")
        else:
            out.append(path)
    return out


def _defines_case(path: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return re.search(r"^def case\(", f.read(), re.MULTILINE) is not None
    except OSError:
        return False


def check_case(obj, path: str, call: str) -> None:
    """What ``case()`` returned must be a :class:`shardproof.Case`."""
    from .case import Case
    if isinstance(obj, Case):
        return
    shown = repr(obj)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    raise UsageError(f"{call} in {path} returned {type(obj).__name__} ({shown}), not a shardproof.Case: "
                     f"return Case(single=..., distributed=..., inputs=...) (see README)")
