"""Writing a decode segment's end times into a timeline (systems/sim/timeline_writes.py, systems/sim/_timeline.c):
the C function of the compiled core and the Python fallback store the same bytes and refuse the same bad input."""

from __future__ import annotations

import math
import random
import struct
from array import array

import pytest

from systems.sim import timeline_writes
from systems.sim.native import status

WRITERS = [pytest.param(timeline_writes.put_doubles_in_python, id="python")]
if timeline_writes.put_doubles is not timeline_writes.put_doubles_in_python:
    WRITERS.append(pytest.param(timeline_writes.put_doubles, id="c"))


def test_the_compiled_core_writes_with_its_c_function() -> None:
    if status().active:
        assert timeline_writes.put_doubles is not timeline_writes.put_doubles_in_python
    else:
        assert timeline_writes.put_doubles is timeline_writes.put_doubles_in_python


@pytest.mark.parametrize("put", WRITERS)
def test_values_land_at_the_offset_bit_for_bit(put) -> None:
    rng = random.Random(3)
    values = [rng.uniform(0, 1e4) for _ in range(37)] + [0.1 + 0.2, -0.0, math.inf, 5e-324]
    timeline = array("d", bytes(8 * 100))
    put(timeline, 11, values)
    assert timeline[:11].tobytes() == bytes(88) and timeline[11 + len(values):].tobytes() == bytes(8 * (89 - len(values)))
    assert timeline[11:11 + len(values)].tobytes() == struct.pack(f"{len(values)}d", *values)
    put(timeline, 0, [])  # nothing to write
    assert len(timeline) == 100


@pytest.mark.parametrize("put", WRITERS)
def test_writes_past_the_end_or_before_the_start_are_refused(put) -> None:
    timeline = array("d", bytes(8 * 4))
    with pytest.raises(IndexError, match="the timeline holds 4"):
        put(timeline, 3, [1.0, 2.0])
    with pytest.raises(IndexError):
        put(timeline, -1, [1.0])
    assert timeline.tobytes() == bytes(32)  # nothing written


@pytest.mark.parametrize("put", WRITERS)
def test_only_numbers_are_written(put) -> None:
    with pytest.raises(TypeError):
        put(array("d", bytes(16)), 0, [1.0, "two"])


@pytest.mark.skipif(timeline_writes.put_doubles is timeline_writes.put_doubles_in_python,
                    reason="the compiled core's _timeline extension is not in use")
def test_the_c_function_wants_a_buffer_of_doubles_and_a_list() -> None:
    put = timeline_writes.put_doubles
    with pytest.raises(TypeError, match="buffer of doubles"):
        put(array("f", bytes(16)), 0, [1.0])
    with pytest.raises(TypeError, match="must be a list"):
        put(array("d", bytes(16)), 0, (1.0,))
    with pytest.raises(TypeError, match="3 arguments"):
        put(array("d", bytes(16)), 0)
