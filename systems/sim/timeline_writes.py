"""How a simulated instance writes a planned decode segment's end times into its timeline (an ``array('d')``).

With the compiled core (:mod:`systems.sim.native`), :func:`put_doubles` is the C function of
``systems/sim/_timeline.c``, which stores each float's double; from the sources it is a slice assignment of an
array made from the list. The same 8 bytes either way: array's own conversions parse every item through a
format string, several hundred instructions a number, which the C function skips.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable


def put_doubles_in_python(timeline: array, offset: int, values: list[float]) -> None:
    """``timeline[offset:offset + len(values)] = values`` for entries the timeline holds already."""
    if offset < 0 or offset + len(values) > len(timeline):
        raise IndexError(f"put of {len(values)} values at {offset}: the timeline holds {len(timeline)}")
    timeline[offset:offset + len(values)] = array("d", values)


def _writer() -> Callable[[array, int, list[float]], None]:
    try:
        from systems.sim._timeline import put  # type: ignore[import-not-found]
    except ImportError:
        return put_doubles_in_python
    return put  # type: ignore[no-any-return]


put_doubles = _writer()  # found once at import
