"""The event queue: a heap of events ordered by ``(time, priority, seq)``; the clock belongs to the queue.

``seq`` is a per-queue counter, so events at the same time and priority run in the order they were
scheduled and a run is deterministic. Handlers receive the event time and schedule follow-ups. The heap is
``heapq`` over ``(time, key, handler, arg)`` tuples, ``key`` being ``priority << SEQ_BITS | seq``: no two
events share a key, so a comparison never reaches the handler.

A *stream* (:meth:`EventQueue.set_stream`) is a list of events known in advance, already in time order, all
of one priority that no scheduled event uses (the simulator's arrivals): the queue runs them where the heap
would have put them, ``(time, priority)`` against the heap's first event, without pushing them through the
heap one by one. They count as events (``processed``, ``len``) like the others.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from heapq import heappop, heappush
from typing import Any

# Priorities at equal times: iteration ends free capacity before new work is placed on it.
PRIO_ITERATION = 0
PRIO_TRANSFER = 1
PRIO_ARRIVAL = 2
PRIO_SAMPLE = 3

INF = float("inf")

SEQ_BITS = 40  # an event's key is priority << SEQ_BITS | seq: (priority, seq) in one integer
SEQ_LIMIT = 1 << SEQ_BITS
PRIO_LIMIT = 1 << 20


Event = tuple[float, int, Callable[[float, Any], None], Any]  # (time, key, handler, arg)


class EventQueue:
    """A discrete-event clock and its pending events."""

    __slots__ = ("_heap", "_seq", "_stream_args", "_stream_handler", "_stream_pos", "_stream_prio", "_stream_times",
                 "now", "processed")

    def __init__(self) -> None:
        self._heap: list[Event] = []
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
        heappush(self._heap, (time if time > self.now else self.now, priority << SEQ_BITS | self._seq, handler, arg))

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
        n = 0
        times, args, on_stream = self._stream_times, self._stream_args, self._stream_handler
        # the stream's events sort after every scheduled event of a lower priority and before every one of a
        # higher priority at the same time: the largest key of their priority
        stream_key = self._stream_prio << SEQ_BITS | (SEQ_LIMIT - 1)
        k, n_stream = self._stream_pos, len(times)
        t_next = times[k] if k < n_stream else INF  # the stream's next event
        while True:
            if heap and (k >= n_stream or heap[0][0] < t_next or (heap[0][0] == t_next and heap[0][1] < stream_key)):
                time, _, handler, arg = heap[0]
                if time > until:
                    break
                heappop(heap)
                self.now = time
                handler(time, arg)
            elif k < n_stream:
                time = t_next
                if time > until:
                    break
                arg = args[k]
                k += 1
                self._stream_pos = k
                t_next = times[k] if k < n_stream else INF
                self.now = time
                on_stream(time, arg)  # type: ignore[misc]
            else:
                break
            n += 1
            if on_progress is not None and n % progress_every == 0:
                on_progress(time)
        self.processed += n
