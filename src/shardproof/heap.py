"""The garbage collector's full collections kept off the objects a run did not make.

A run (capture, relating the inputs, the proof) allocates hundreds of thousands of small
objects (traced nodes, terms, relations), so CPython's collector runs its oldest generation
several times per run, and each of those scans the whole heap: torch's modules and the
case's tensors included, which the run never frees. That scan is a cost per allocated
object times the heap, i.e. it grows with the ranks a run holds (measured on the sweep's
Llama step at dp8: ~0.5 of ~2.4 CPU seconds). :func:`frozen_heap` moves the objects alive on
entry to the permanent generation (``gc.freeze``) for the run and back on exit
(``gc.unfreeze``): objects the run makes are collected as before; what it finds alive is not
scanned again. Nested runs freeze once; a process that froze objects itself is left alone.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager

ENABLED = True
_depth = [0]


@contextmanager
def frozen_heap():
    """Freeze the objects alive now for the duration (module doc); also a function decorator."""
    own = ENABLED and _depth[0] == 0 and gc.get_freeze_count() == 0 and gc.isenabled()
    _depth[0] += 1
    if own:
        gc.freeze()
    try:
        yield
    finally:
        _depth[0] -= 1
        if own:
            gc.unfreeze()
