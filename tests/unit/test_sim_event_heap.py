"""The simulator's event heaps (systems/sim/events.py, systems/sim/_event_heap.c): the C heap of the compiled core
and the list heap of the sources pop in ``(time, key)`` order as ``heapq`` does, refuse the same bad input, and
the queue built on them reuses spent events without holding on to their arguments."""

from __future__ import annotations

import gc
import heapq
import math
import random
import weakref

import pytest

from systems.sim import events
from systems.sim.events import SEQ_BITS, EventQueue, ListHeap, _Event
from systems.sim.native import status

HEAPS = [pytest.param(ListHeap, id="list")]
if events.HEAP_TYPE is not ListHeap:
    HEAPS.append(pytest.param(events.HEAP_TYPE, id="c"))


def test_the_compiled_core_queues_events_in_its_c_heap() -> None:
    if status().active:
        assert events.HEAP_TYPE is not ListHeap and events.HEAP_TYPE.__name__ == "EventHeap"
    else:
        assert events.HEAP_TYPE is ListHeap


def _event(time: float, key: int) -> _Event:
    return _Event(time, key, lambda t, a: None, key)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("heap_type", HEAPS)
def test_pops_come_in_heapq_order_with_ties_on_time(heap_type, seed: int) -> None:
    rng = random.Random(seed)
    heap, reference = heap_type(), []
    key = 0
    popped, expected = [], []
    for _ in range(4000):
        if rng.random() < 0.6 or not reference:
            key += 1
            k = rng.randint(0, 3) << SEQ_BITS | key
            t = float(rng.randint(0, 30)) if rng.random() < 0.8 else rng.uniform(0, 30)
            heap.push(t, k, _event(t, k))
            heapq.heappush(reference, (t, k))
        else:
            popped.append(heap.pop().key)
            expected.append(heapq.heappop(reference)[1])
        assert len(heap) == len(reference)
    while reference:
        assert heap.first().key == reference[0][1]
        popped.append(heap.pop().key)
        expected.append(heapq.heappop(reference)[1])
    assert popped == expected and len(heap) == 0 and not heap and heap.first() is None


@pytest.mark.parametrize("heap_type", HEAPS)
def test_pop_before_leaves_the_first_event_when_the_other_comes_first(heap_type) -> None:
    heap = heap_type()
    assert heap.pop_before(0.0, 0) is None  # empty
    heap.push(2.0, 1 << SEQ_BITS | 7, _event(2.0, 1 << SEQ_BITS | 7))
    assert heap.pop_before(1.5, 3 << SEQ_BITS) is None  # earlier time
    assert heap.pop_before(2.0, 1 << SEQ_BITS | 6) is None  # same time, smaller key
    assert len(heap) == 1
    assert heap.pop_before(2.0, 1 << SEQ_BITS | 8).key == 1 << SEQ_BITS | 7  # same time, larger key
    heap.push(2.0, 5, _event(2.0, 5))
    assert heap.pop_before(math.inf, 0).time == 2.0 and len(heap) == 0


@pytest.mark.parametrize("heap_type", HEAPS)
def test_an_empty_pop_is_an_index_error(heap_type) -> None:
    with pytest.raises(IndexError, match="empty event heap"):
        heap_type().pop()


@pytest.mark.skipif(events.HEAP_TYPE is ListHeap, reason="the compiled core is not built")
def test_the_c_heap_refuses_bad_arguments_and_keeps_its_entries() -> None:
    heap = events.HEAP_TYPE()
    heap.push(1.0, 1, _event(1.0, 1))
    with pytest.raises(TypeError):
        heap.push("soon", 2, _event(1.0, 2))
    with pytest.raises(TypeError):
        heap.push(1.0, "two", _event(1.0, 2))
    with pytest.raises(OverflowError):
        heap.push(1.0, 1 << 70, _event(1.0, 2))
    with pytest.raises(ValueError, match="NaN"):
        heap.push(math.nan, 2, _event(1.0, 2))
    with pytest.raises(TypeError, match="3 arguments"):
        heap.push(1.0, 2)
    with pytest.raises(TypeError, match="2 arguments"):
        heap.pop_before(1.0)
    with pytest.raises(TypeError, match="no arguments"):
        events.HEAP_TYPE(3)
    assert len(heap) == 1 and heap.pop().key == 1


@pytest.mark.parametrize("heap_type", HEAPS)
def test_a_cycle_through_the_heap_is_collected(heap_type) -> None:
    class Owner:
        pass

    owner = Owner()
    owner.heap = heap_type()  # type: ignore[attr-defined]
    owner.heap.push(1.0, 1, _Event(1.0, 1, lambda t, a: None, owner))  # type: ignore[attr-defined]
    gone = weakref.ref(owner)
    del owner
    gc.collect()
    assert gone() is None


def test_the_queue_releases_an_argument_once_its_event_has_run_and_reuses_the_event() -> None:
    class Payload:
        pass

    loop, seen = EventQueue(), []
    payload = Payload()
    gone = weakref.ref(payload)
    loop.schedule(1.0, 0, lambda t, a: seen.append(t), payload)
    del payload
    loop.run()
    assert seen == [1.0] and gone() is None
    loop.schedule(2.0, 0, lambda t, a: seen.append(a), "again")  # on the spent event
    loop.run()
    assert seen == [1.0, "again"] and loop.processed == 2


def test_events_after_until_stay_queued_in_order() -> None:
    loop, seen = EventQueue(), []
    for t, prio in [(3.0, 1), (1.0, 0), (3.0, 0), (2.0, 2), (5.0, 0)]:
        loop.schedule(t, prio, lambda t, a: seen.append((t, a)), prio)
    loop.run(until=2.5)
    assert seen == [(1.0, 0), (2.0, 2)] and len(loop) == 3 and loop.now == 2.0
    loop.run(until=3.0, on_progress=lambda t: None, progress_every=1)
    assert seen[2:] == [(3.0, 0), (3.0, 1)] and len(loop) == 1
    loop.run()
    assert seen[4:] == [(5.0, 0)] and len(loop) == 0 and loop.processed == 5
