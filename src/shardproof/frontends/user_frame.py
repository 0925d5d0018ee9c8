"""Where in the user's own code an exception was raised: the deepest traceback frame
that is not in torch, shardproof or the Python installation (a model that fails to trace
is reported at its own file:line)."""
from __future__ import annotations

import os
import sys
import sysconfig
import traceback


def _library_dirs() -> tuple[str, ...]:
    dirs = {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}  # the shardproof package
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.add(os.path.abspath(path))
    dirs.update(os.path.abspath(p) for p in sys.path if p and "site-packages" in p)
    return tuple(d + os.sep for d in dirs)


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def user_frame(exc: BaseException):
    """The deepest ``FrameSummary`` in user code across `exc` and its causes, or None."""
    libs = _library_dirs()
    zoo = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "zoo")
    zoo = os.path.abspath(zoo) + os.sep  # the bundled cases are user code too

    def user(filename: str) -> bool:
        path = os.path.abspath(filename)
        return not filename.startswith("<") and (path.startswith(zoo) or not path.startswith(libs))
    for e in _chain(exc):
        frames = [f for f in traceback.extract_tb(e.__traceback__) if user(f.filename)]
        if frames:
            return frames[-1]
    return None


def user_location(exc: BaseException) -> str:
    """`` (at FILE:LINE in FUNC: CODE)`` for the user's failing frame, or ''."""
    f = user_frame(exc)
    if f is None:
        return ""
    code = f" `{f.line.strip()}`" if f.line else ""
    return f" (at {f.filename}:{f.lineno} in {f.name}:{code})"
