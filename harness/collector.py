"""Keeping CPython's cyclic garbage collector off the objects a measured point builds and keeps.

A simulated point leaves millions of small objects alive until its records are summarised and written (on
the Azure conversation hour: 19,366 requests, their ranges and the instances' state). The simulator runs
with the collector paused; resumed, it walks every one of them, once as young objects, again as middle-aged
ones and once more in a full collection, and finds nothing to free (about 0.15 s of a 2.4 s process on a
slow machine, seconds at a million requests). :func:`collector_paused` pauses it for a whole point and,
on leaving, freezes (``gc.freeze``) what is still alive before resuming it, so the collector never walks
those objects. :func:`release_frozen` hands them back (``gc.unfreeze``) and collects at once: a process that
goes on to other work (the next job of a sweep run in one process, the next deployment of a comparison, the
tests) must call it, or the cyclic garbage among them would stay frozen, and be frozen again with the next
point's objects, job after job. A single ``python -m harness`` run ends instead, and skips that collection.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic collector for the block; on leaving, freeze the objects still alive, then resume
    it (when it was running before). Objects freed by reference counting are freed as usual throughout."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.freeze()
            gc.enable()


def release_frozen() -> None:
    """Hand every frozen object back to the collector and collect: the cyclic garbage among them (a finished
    point's simulation) is freed now, before another point could freeze it again."""
    gc.unfreeze()
    gc.collect()
