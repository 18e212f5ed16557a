"""The event queue: a heap of ``(time, priority, seq, handler, arg)``; the clock belongs to the queue.

``seq`` is a per-queue counter, so events at the same time and priority run in the order they were
scheduled and a run is deterministic. Handlers receive the event time and schedule follow-ups.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

# Priorities at equal times: iteration ends free capacity before new work is placed on it.
PRIO_ITERATION = 0
PRIO_TRANSFER = 1
PRIO_ARRIVAL = 2
PRIO_SAMPLE = 3


class EventQueue:
    """A discrete-event clock and its pending events."""

    __slots__ = ("_heap", "_seq", "now", "processed")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Callable[[float, Any], None], Any]] = []
        self._seq = 0
        self.now = 0.0
        self.processed = 0

    def schedule(self, time: float, priority: int, handler: Callable[[float, Any], None], arg: Any = None) -> None:
        """Run ``handler(time, arg)`` at ``time`` (never before the current time)."""
        self._seq += 1
        heappush(self._heap, (time if time > self.now else self.now, priority, self._seq, handler, arg))

    def __len__(self) -> int:
        return len(self._heap)

    def run(self, until: float = float("inf"), on_progress: Callable[[float], None] | None = None,
            progress_every: int = 20000) -> None:
        """Process events in order until none is left or the next is after ``until``."""
        heap = self._heap
        pop = heappop
        n = 0
        if on_progress is None and until == float("inf"):  # the common case, without the checks
            while heap:
                time, _, _, handler, arg = pop(heap)
                self.now = time
                handler(time, arg)
                n += 1
            self.processed += n
            return
        while heap and heap[0][0] <= until:
            time, _, _, handler, arg = pop(heap)
            self.now = time
            handler(time, arg)
            n += 1
            if on_progress is not None and n % progress_every == 0:
                on_progress(time)
        self.processed += n
