"""The event queue: a heap of events ordered by ``(time, priority, seq)``; the clock belongs to the queue.

``seq`` is a per-queue counter, so events at the same time and priority run in the order they were
scheduled and a run is deterministic. Handlers receive the event time and schedule follow-ups.

The heap: with the simulator's compiled core (:mod:`systems.sim.native`), ``EventHeap`` of
``systems/sim/_event_heap.c``, which stores each event's ``(time, key)`` beside it in one array, so a sift reads
that array and not the event objects (on a cluster of a thousand instances, a thousand events are pending and
most have left the cache since they were scheduled); from the sources, :class:`ListHeap`, a binary heap of the
:class:`_Event` objects in a list that reads their fields. The order is a strict total order (no two events share
a ``seq``), so every pop takes the one smallest event and either heap runs the events in the very order
``heapq`` on tuples ran them. An event object is reused once it has run (the queue keeps the spent ones), so
running an event frees nothing that has gone cold in the meantime.

A *stream* (:meth:`EventQueue.set_stream`) is a list of events known in advance, already in time order, all
of one priority that no scheduled event uses (the simulator's arrivals): the queue runs them where the heap
would have put them, ``(time, priority)`` against the heap's first event, without pushing them through the
heap one by one. They count as events (``processed``, ``len``) like the others.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

# Priorities at equal times: iteration ends free capacity before new work is placed on it.
PRIO_ITERATION = 0
PRIO_TRANSFER = 1
PRIO_ARRIVAL = 2
PRIO_SAMPLE = 3

INF = float("inf")

SEQ_BITS = 40  # an event's key is priority << SEQ_BITS | seq: (priority, seq) in one integer
SEQ_LIMIT = 1 << SEQ_BITS
PRIO_LIMIT = 1 << 20


class _Event:
    """One scheduled event: ``handler(time, arg)``, ordered by ``(time, key)``."""

    __slots__ = ("arg", "handler", "key", "time")

    def __init__(self, time: float, key: int, handler: Callable[[float, Any], None], arg: Any) -> None:
        self.time = time
        self.key = key
        self.handler = handler
        self.arg = arg


def _push(heap: list[_Event], event: _Event) -> None:
    """Add ``event`` to ``heap`` (a binary heap, smallest ``(time, key)`` first)."""
    heap.append(event)
    t, k = event.time, event.key
    i = len(heap) - 1
    while i > 0:
        parent = (i - 1) >> 1
        above = heap[parent]
        if t < above.time or (t == above.time and k < above.key):
            heap[i] = above
            i = parent
        else:
            break
    heap[i] = event


def _pop(heap: list[_Event]) -> _Event:
    """Remove and return the smallest event of a non-empty ``heap``."""
    top = heap[0]
    last = heap.pop()
    n = len(heap)
    if n:
        t, k = last.time, last.key
        i = 0
        while True:
            c = 2 * i + 1
            if c >= n:
                break
            child = heap[c]
            if c + 1 < n:
                right = heap[c + 1]
                if right.time < child.time or (right.time == child.time and right.key < child.key):
                    c += 1
                    child = right
            if child.time < t or (child.time == t and child.key < k):
                heap[i] = child
                i = c
            else:
                break
        heap[i] = last
    return top


class ListHeap:
    """The event heap from the sources: ``EventHeap``'s methods over a list of :class:`_Event` objects, compared
    by their own ``time`` and ``key`` (which must be the ones passed to :meth:`push`)."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: list[_Event] = []

    def __len__(self) -> int:
        return len(self._items)

    def push(self, time: float, key: int, item: _Event) -> None:
        """Add ``item``, an event whose ``time`` and ``key`` are ``time`` and ``key``."""
        _push(self._items, item)

    def pop(self) -> _Event:
        """The event of the smallest ``(time, key)``, removed; ``IndexError`` if empty."""
        if not self._items:
            raise IndexError("pop from an empty event heap")
        return _pop(self._items)

    def pop_before(self, time: float, key: int) -> Optional[_Event]:
        """:meth:`pop` unless the heap is empty or ``(time, key)`` comes first (then None)."""
        items = self._items
        if not items:
            return None
        top = items[0]
        if time < top.time or (time == top.time and key < top.key):
            return None
        return _pop(items)

    def first(self) -> Optional[_Event]:
        """The event :meth:`pop` would return, or None if empty."""
        return self._items[0] if self._items else None


def _heap_type() -> Callable[[], Any]:
    try:
        from systems.sim._event_heap import EventHeap  # type: ignore[import-not-found]
    except ImportError:
        return ListHeap
    return EventHeap  # type: ignore[no-any-return]


HEAP_TYPE = _heap_type()  # found once at import: EventHeap with the compiled core, else ListHeap


class EventQueue:
    """A discrete-event clock and its pending events."""

    __slots__ = ("_heap", "_push", "_seq", "_spent", "_stream_args", "_stream_handler", "_stream_pos", "_stream_prio",
                 "_stream_times", "now", "processed")

    def __init__(self) -> None:
        self._heap: Any = HEAP_TYPE()
        self._push: Callable[[float, int, _Event], None] = self._heap.push  # bound once
        self._spent: list[_Event] = []  # events that have run, reused by schedule
        self._seq = 0
        self.now = 0.0
        self.processed = 0
        self._stream_times: Sequence[float] = ()
        self._stream_args: Sequence[Any] = ()
        self._stream_handler: Callable[[float, Any], None] | None = None
        self._stream_prio = 0
        self._stream_pos = 0

    def schedule(self, time: float, priority: int, handler: Callable[[float, Any], None], arg: Any = None) -> None:
        """Run ``handler(time, arg)`` at ``time`` (never before the current time)."""
        self._seq += 1
        if self._seq >= SEQ_LIMIT or not 0 <= priority < PRIO_LIMIT:
            raise OverflowError(f"event {self._seq} of priority {priority}: the queue orders at most {SEQ_LIMIT} "
                                f"events of priorities 0..{PRIO_LIMIT - 1}")
        time = time if time > self.now else self.now
        key = priority << SEQ_BITS | self._seq
        spent = self._spent
        if spent:
            event = spent.pop()
            event.time = time
            event.key = key
            event.handler = handler
            event.arg = arg
        else:
            event = _Event(time, key, handler, arg)
        self._push(time, key, event)

    def set_stream(self, times: Sequence[float], priority: int, handler: Callable[[float, Any], None],
                   args: Sequence[Any]) -> None:
        """Run ``handler(times[k], args[k])`` for every ``k``, in order, at those times (see the module
        docstring): ``times`` must be non-decreasing, not before the current time, and ``priority`` used by
        no event passed to :meth:`schedule` (so no two events can tie on time and priority). Replaces an
        earlier stream."""
        if len(times) != len(args):
            raise ValueError(f"a stream of {len(times)} times and {len(args)} arguments")
        self._stream_times, self._stream_args = times, args
        self._stream_handler, self._stream_prio, self._stream_pos = handler, priority, 0

    def __len__(self) -> int:
        return len(self._heap) + len(self._stream_times) - self._stream_pos

    def run(self, until: float = INF, on_progress: Callable[[float], None] | None = None,
            progress_every: int = 20000) -> None:
        """Process events in order until none is left or the next is after ``until``."""
        heap = self._heap
        spent = self._spent
        # the heap's methods bound once, and the stream's times and key kept as the objects they are: compiled,
        # a call with a float or int argument would box it into a new object every time
        pop_before, pop = heap.pop_before, heap.pop
        n = 0
        times: Sequence[Any] = self._stream_times
        args, on_stream = self._stream_args, self._stream_handler
        # the stream's events sort after every scheduled event of a lower priority and before every one of a
        # higher priority at the same time: the largest key of their priority
        stream_key: Any = self._stream_prio << SEQ_BITS | (SEQ_LIMIT - 1)
        k, n_stream = self._stream_pos, len(times)
        t_next: Any = times[k] if k < n_stream else INF  # the stream's next event
        if on_progress is None and until == INF:  # the common case, without the checks
            while True:
                event = pop_before(t_next, stream_key) if k < n_stream else (pop() if heap else None)
                if event is not None:
                    time = event.time
                    self.now = time
                    event.handler(time, event.arg)
                    event.arg = None
                    spent.append(event)
                elif k < n_stream:
                    stream_time = t_next
                    arg = args[k]
                    k += 1
                    self._stream_pos = k
                    t_next = times[k] if k < n_stream else INF
                    self.now = stream_time
                    on_stream(stream_time, arg)  # type: ignore[misc]
                else:
                    break
                n += 1
            self.processed += n
            return
        time = self.now
        while True:
            event = pop_before(t_next, stream_key) if k < n_stream else (pop() if heap else None)
            if event is not None:
                if event.time > until:
                    heap.push(event.time, event.key, event)  # back where it was: the order is total
                    break
                time = event.time
                self.now = time
                event.handler(time, event.arg)
                event.arg = None
                spent.append(event)
            elif k < n_stream:
                if t_next > until:
                    break
                stream_time = t_next
                arg = args[k]
                k += 1
                self._stream_pos = k
                t_next = times[k] if k < n_stream else INF
                self.now = stream_time
                time = self.now
                on_stream(stream_time, arg)  # type: ignore[misc]
            else:
                break
            n += 1
            if on_progress is not None and n % progress_every == 0:
                on_progress(time)
        self.processed += n
