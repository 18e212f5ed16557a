"""Precise waiting on an asyncio loop: coarse timer sleep, then yield-spin through the last stretch.

Loop timers are only millisecond-accurate (epoll and libuv time out in whole milliseconds), so a wait
sleeps until ``spin_s`` before the deadline and then yields to the loop (``sleep(0)``) until it passes:
I/O keeps being served while spinning. All times are ``time.perf_counter()`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from collections.abc import Callable
from time import perf_counter
from typing import Any, Optional

DEFAULT_SPIN_S = 0.0015

log = logging.getLogger(__name__)


async def sleep_until(deadline: float, spin_s: float = DEFAULT_SPIN_S) -> None:
    """Return as soon as possible after ``perf_counter()`` reaches ``deadline``."""
    while True:
        remaining = deadline - perf_counter()
        if remaining <= 0:
            return
        if remaining > spin_s:
            await asyncio.sleep(remaining - spin_s)
        else:
            await asyncio.sleep(0)


class PreciseScheduler:
    """``call_at(when, fn, *args)`` with sub-millisecond accuracy, driven by one task on the running loop.

    With ``spin_s == 0`` it relies on the loop's timers alone (millisecond accuracy, no busy waiting).
    """

    def __init__(self, spin_s: float = DEFAULT_SPIN_S) -> None:
        self._spin_s = spin_s
        self._heap: list[tuple[float, int, Callable[..., Any], tuple[Any, ...]]] = []
        self._seq = itertools.count()
        self._wake: Optional[asyncio.Future[None]] = None
        self._task: Optional[asyncio.Task[None]] = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._drive())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def call_at(self, when: float, fn: Callable[..., Any], *args: Any) -> None:
        heapq.heappush(self._heap, (when, next(self._seq), fn, args))
        wake = self._wake
        if wake is not None and self._heap[0][0] == when and not wake.done():
            wake.set_result(None)

    async def _drive(self) -> None:
        loop = asyncio.get_running_loop()
        heap = self._heap
        while True:
            if not heap:
                await self._sleep(loop, None)
                continue
            now = perf_counter()
            when = heap[0][0]
            if when <= now:
                while heap and heap[0][0] <= now:
                    _, _, fn, args = heapq.heappop(heap)
                    try:
                        fn(*args)
                    except Exception:
                        log.exception("scheduled callback failed")
                await asyncio.sleep(0)
            elif when - now > self._spin_s:
                await self._sleep(loop, when - now - self._spin_s)
            else:
                await asyncio.sleep(0)

    async def _sleep(self, loop: asyncio.AbstractEventLoop, delay: Optional[float]) -> None:
        """Sleep ``delay`` seconds (forever if None) or until ``call_at`` adds an earlier item."""
        wake: asyncio.Future[None] = loop.create_future()
        self._wake = wake
        handle = None if delay is None else loop.call_later(delay, _resolve, wake)
        try:
            await wake
        finally:
            self._wake = None
            if handle is not None:
                handle.cancel()


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
