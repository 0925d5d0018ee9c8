"""Progress of a long run on a terminal: a rich bar with the current stage. Off a terminal
(pipes, CI logs, ``--json -``) the callback is None and nothing is printed."""
from __future__ import annotations

from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


@contextmanager
def progress_bar(console: Console, enabled: bool = True):
    """Yields a ``progress(stage, done, total)`` callback drawing a transient bar on
    `console`, or None when `enabled` is false or `console` is not a terminal."""
    if not enabled or not console.is_terminal:
        yield None
        return
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("starting", total=None)

        def update(stage: str, done: int, total: int) -> None:
            bar.update(task, description=stage, completed=done, total=total)
        yield update
