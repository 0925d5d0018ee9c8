"""Capturing a training case one rank class at a time (issue 16): the ranks' fingerprints
(frontends/rank_classes.py) group them into classes, each class's representative is traced
(its microbatch loop derived where it repeats one program: frontends/microbatches.py) and the
other members' graphs derived from its trace where they can be."""
from __future__ import annotations

from typing import Callable

from .microbatches import capture_rank, loop_record
from .rank_classes import (classes_of, derivable, derive_events, derive_graph, fingerprint_step,
                           microbatch_classes)
from .torch_collectives import functional_collectives


def capture_class(make_program: Callable, world: int, data_of: Callable, train, events: bool, members: list,
                  fps: list) -> tuple[list, list, bool, dict | None]:
    """One class's (graphs, input values) in `members`' order, whether the other members'
    graphs were derived, and the representative's microbatch loop (frontends/microbatches.py:
    derived where it repeats one program; None where traced whole): the representative (``members[0]``) traced, each other member's graph
    derived from it (:func:`derive_graph`), or traced too where the trace cannot stand for the
    class (:func:`derivable`). `fps`: the members' fingerprints. Runs where the executor puts it."""
    from .torch_train import capture_rank_step
    from .torch_events import rank_events
    keep: dict = {}
    graph, value, loop = capture_rank(make_program, members[0], world, data_of(members[0]), train, events, keep,
                                      fps[0].loop if fps[0] is not None else None)
    graphs, values = [graph], [value]
    derived = len(members) > 1 and derivable(graph, fps[0])
    plain: dict = {}
    for r, fp in zip(members[1:], fps[1:]):
        if derived:
            g = derive_graph(graph, fps[0], keep["gm"], fp, r, plain)
            g.events = derive_events(graph, g, r) or (rank_events(g, r) if events else None)
            graphs.append(g)
            values.append(fp.inputs)
        else:
            g, v = capture_rank_step(make_program, r, world, data_of(r), train, events)
            graphs.append(g)
            values.append(v)
    return graphs, values, derived, loop


def capture_by_class(make_program: Callable, world: int, data_of: Callable, train, events: bool,
                     say: Callable[[int], None] | None = None,
                     map_classes: Callable | None = None) -> tuple[list, list, list[dict]]:
    """Every rank's (graph, input values) of a training case, one full capture per class
    (:func:`fingerprint_step`, :func:`classes_of`, :func:`capture_class`), and the classes as
    report entries ``{representative, ranks, derived, microbatch_classes}`` (`derived`: the
    other ranks' graphs were derived from the representative's rather than captured).
    `map_classes(capture, classes)`: runs ``capture(i)`` for each class (an executor's
    workers: frontends/rank_pool.py); None: here, one after the other, `say(representative)`
    before each."""
    with functional_collectives():
        fps = [fingerprint_step(make_program, r, world, data_of(r), train, routed=True, loop=loop_record(train))
               for r in range(world)]
    classes = classes_of(fps)
    for members in classes:  # only a representative's loop record is used (capture_class)
        for r in members[1:]:
            if fps[r] is not None:
                fps[r].loop = None

    def capture(i: int):
        return capture_class(make_program, world, data_of, train, events, classes[i], [fps[r] for r in classes[i]])
    if map_classes is None:
        results = []
        for i, members in enumerate(classes):
            if say:
                say(members[0])
            results.append(capture(i))
    else:
        results = map_classes(capture, classes)
    graphs: list = [None] * world
    values: list = [None] * world
    out = []
    for members, (class_graphs, class_values, derived, loop) in zip(classes, results):
        for r, g, v in zip(members, class_graphs, class_values):
            graphs[r], values[r] = g, v
        out.append({"representative": members[0], "ranks": members, "derived": derived,
                    "microbatch_classes": microbatch_classes(fps[members[0]])} | ({"microbatch_loop": loop} if loop else {}))
    return graphs, values, out
