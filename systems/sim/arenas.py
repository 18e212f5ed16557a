"""Python's object arenas on transparent huge pages while a simulation runs and its records are built.

A simulation at a million requests keeps gigabytes of small objects alive and reaches them in an order no
cache follows: with 4 KiB pages most of those reads also miss the TLB, and the run takes a page fault for every
4 KiB it grows. :func:`huge_page_arenas` has CPython's small-object allocator take its 1 MiB arenas from
2 MiB-aligned regions advised for huge pages (``systems/sim/_arenas.c``, built with the compiled core by
``python -m systems.sim.native_build``), and puts the previous allocator back on leaving. Where objects live
changes; what the simulation computes does not.

A no-op when the extension is not there (the compiled core is not built or not in use), on a kernel without
transparent huge pages, or with ``DISAGG_SIM_HUGE_PAGES=0`` in the environment. Nested blocks install once.
:func:`simulation_memory` adds the other half of how a run keeps its objects: the cyclic collector paused.
"""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Optional

log = logging.getLogger(__name__)

ENV_SWITCH = "DISAGG_SIM_HUGE_PAGES"  # "0": leave CPython's arena allocator alone


def _extension() -> Optional[ModuleType]:
    try:
        from systems.sim import _arenas  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _arenas


_ARENAS = _extension()  # the extension module, or None: found once at import


def available() -> bool:
    """Whether :func:`huge_page_arenas` changes the allocator in this process and environment."""
    return _ARENAS is not None and os.environ.get(ENV_SWITCH, "1") != "0"


@contextmanager
def huge_page_arenas() -> Iterator[None]:
    """Arenas from huge-page regions for the block (when :func:`available`); the previous allocator after it."""
    installed = available() and bool(_ARENAS.install())  # type: ignore[union-attr]
    try:
        yield
    finally:
        if installed:
            _ARENAS.uninstall()  # type: ignore[union-attr]


@contextmanager
def simulation_memory() -> Iterator[None]:
    """For a simulation or the building of its records: the cyclic collector paused (the block makes millions of
    small objects that live to its end, which the collector would rescan again and again, at a cost growing with
    the run, finding nothing) and their arenas on huge pages (:func:`huge_page_arenas`)."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        with huge_page_arenas():
            yield
    finally:
        if gc_was_enabled:
            gc.enable()
