"""Runs one schedule (or one process's share of it) against one endpoint and collects one record per request.

Open loop: request i is issued at ``t0 + spec.arrival_s`` by a timer loop (coarse sleep, then a short
yield-spin; see ``clock.py``); a read that ends after a request's due time issues it at once, so a loop
iteration busy with many reads does not delay it. Closed loop: ``concurrency`` slots; when a request ends its slot issues the
next one at once, and that moment is the new request's scheduled arrival. If ``max_outstanding`` requests
are in flight when the next one is due, issuing stops: the rest are recorded as never sent (unfinished)
and the run is marked invalid. In-flight requests then get ``drain_timeout_s`` to finish before they are
cut (unfinished); any request running longer than ``request_timeout_s`` fails.

The garbage collector is paused while the schedule runs and restored afterwards: a full collection
stalls the loop for 10+ ms once many records exist, and a run creates almost no reference cycles.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from time import perf_counter
from typing import Any, Optional

import numpy as np

from harness.loadgen.clock import DEFAULT_SPIN_S, sleep_until
from harness.loadgen.config import LoadGenOptions, LoadResult, TargetConfig
from harness.loadgen.connection import ConnectionPool
from harness.loadgen.endpoint import resolve_endpoint
from harness.loadgen.exchange import Exchange, unsent_record
from harness.loadgen.payload import RequestEncoder
from vocab.records import RequestRecord, RequestSpec, RequestStatus
from workloads.arrivals import ArrivalSchedule

log = logging.getLogger(__name__)

CLIENT_NAME = "http1-asyncio-protocol"
PREBUILD_BUDGET_BYTES = 512 * 1024 * 1024  # encode every request before t0 when they fit in this
PREWARM_CONNECTIONS = 32
SPARE_CONNECTIONS = 2
TICK_S = 0.25  # timeout sweep and progress callback period
MAX_BURST_S = 0.0005  # when behind schedule, still let the loop read responses this often
START_DELAY_S = 0.05


def issue_lag_stats_ms(records: Sequence[RequestRecord]) -> dict[str, Optional[float]]:
    """Median, p99 and max of ``sent_s - arrival_s`` (ms) over the sent requests."""
    lags = np.array([r.sent_s - r.arrival_s for r in records if not math.isnan(r.sent_s)], dtype=float)
    if lags.size == 0:
        return {"issue_lag_p50_ms": None, "issue_lag_p99_ms": None, "issue_lag_max_ms": None}
    p50, p99 = np.percentile(lags, [50, 99]) * 1e3
    return {
        "issue_lag_p50_ms": float(p50),
        "issue_lag_p99_ms": float(p99),
        "issue_lag_max_ms": float(lags.max() * 1e3),
    }


def event_loop_name() -> str:
    loop = asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


class LoadRunner:
    """Issues the requests ``indices`` of ``specs`` (all by default) on the running event loop.

    ``prepare()`` encodes requests and opens connections; ``run(t0_wall)`` starts the schedule at wall-clock
    time ``t0_wall`` (``time.time()`` scale; soon after the call by default) and returns the records.
    """

    def __init__(
        self,
        specs: Sequence[RequestSpec],
        schedule: ArrivalSchedule,
        prompts: Sequence[Sequence[int]],
        target: TargetConfig,
        options: LoadGenOptions,
        *,
        indices: Optional[Sequence[int]] = None,
        max_outstanding: Optional[int] = None,
        concurrency: Optional[int] = None,
        on_tick: Optional[Callable[[int], None]] = None,
    ) -> None:
        if len(prompts) != len(specs):
            raise ValueError(f"{len(prompts)} prompts for {len(specs)} specs")
        if schedule.mode not in ("open", "closed"):
            raise ValueError(f"schedule.mode must be 'open' or 'closed', got {schedule.mode!r}")
        self._specs = specs
        self._mode = schedule.mode
        self._indices = list(range(len(specs))) if indices is None else list(indices)
        self._cap = max_outstanding if max_outstanding is not None else options.max_outstanding
        self._concurrency = concurrency if concurrency is not None else (schedule.concurrency or 0)
        if self._mode == "closed":
            if self._concurrency < 1:
                raise ValueError(f"a closed schedule needs concurrency >= 1, got {schedule.concurrency}")
            if self._concurrency > self._cap:
                raise ValueError(
                    f"closed-loop concurrency {self._concurrency} exceeds max_outstanding {self._cap}"
                )
        self._timeout_s = target.request_timeout_s
        self._drain_s = options.drain_timeout_s
        self._on_tick = on_tick
        endpoint = resolve_endpoint(target.base_url)
        self._encoder = RequestEncoder(specs, prompts, target, options, endpoint.host_header, endpoint.path)
        self._pool = ConnectionPool(endpoint.address, endpoint.family, endpoint.ssl_context, endpoint.hostname)
        self._payloads: dict[int, bytes] = {}
        self._inflight: dict[int, Exchange] = {}
        self._records: dict[int, RequestRecord] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._invalid: list[str] = []
        self._t0 = 0.0
        self._n_done = 0
        self._n_retries = 0
        self._issuing = True
        self._stopped = False
        self._idle: Optional[asyncio.Event] = None
        self._all_issued: Optional[asyncio.Event] = None
        self._closed_next: Optional[Iterator[int]] = None
        self._order: list[int] = []  # open loop: request indices by due time
        self._due: list[float] = []  # their due times (perf_counter)
        self._pos = 0  # the next one to issue
        self._cap_reached = False
        self._prepared = False

    # -- set-up ------------------------------------------------------------------------------------------
    async def prepare(self) -> None:
        """Encode the requests (when they fit the budget) and pre-open connections; idempotent."""
        if self._prepared:
            return
        if self._encoder.estimated_bytes(self._indices) <= PREBUILD_BUDGET_BYTES:
            self._payloads = {i: self._encoder.encode(i) for i in self._indices}
        n_warm = min(PREWARM_CONNECTIONS, len(self._indices), self._cap)
        await self._pool.prewarm(n_warm)
        gc.collect()  # now, rather than during the run
        self._prepared = True

    def _payload(self, i: int) -> bytes:
        payload = self._payloads.get(i)
        return payload if payload is not None else self._encoder.encode(i)

    # -- the run -----------------------------------------------------------------------------------------
    async def run(self, t0_wall: Optional[float] = None) -> LoadResult:
        await self.prepare()
        loop = asyncio.get_running_loop()
        if t0_wall is None:
            t0_wall = time.time() + START_DELAY_S
        self._t0 = perf_counter() + (t0_wall - time.time())
        self._idle = asyncio.Event()
        self._all_issued = asyncio.Event()
        ticker = loop.create_task(self._tick())
        started = perf_counter()
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            if self._mode == "open":
                await self._issue_open()
            else:
                await self._issue_closed()
            self._issuing = False
            if self._inflight:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._idle.wait(), timeout=self._drain_s)
        finally:
            self._stopped = True
            self._issuing = False
            ticker.cancel()
            now = perf_counter()
            reason = f"still running at the drain deadline ({self._drain_s:g} s after issuing ended)"
            for ex in list(self._inflight.values()):
                ex.cut(RequestStatus.UNFINISHED, reason, now)
            for task in list(self._tasks):
                task.cancel()
            self._pool.close()
            if gc_was_enabled:
                gc.enable()
        if self._on_tick is not None:
            self._on_tick(self._n_done)
        for i in self._indices:
            if i not in self._records:
                self._records[i] = unsent_record(self._specs[i], math.nan, "not sent: the run stopped first")
        records = tuple(sorted((self._records[i] for i in self._indices), key=lambda r: r.request_id))
        info: dict[str, Any] = {
            "client": CLIENT_NAME,
            "event_loop": event_loop_name(),
            "mode": self._mode,
            "n_requests": len(records),
            "n_sent": sum(1 for r in records if not math.isnan(r.sent_s)),
            "connections_opened": self._pool.n_opened,
            "retries": self._n_retries,
            "run_s": perf_counter() - started,
            **issue_lag_stats_ms(records),
        }
        return LoadResult(records=records, invalid_reasons=tuple(self._invalid), t0_wall=t0_wall, info=info)

    async def _issue_open(self) -> None:
        """Issue every request at its due time. Between timer wake-ups, reads also issue what has come
        due (``_issue_due`` through the pool's due hook), so a busy loop iteration delays nobody."""
        specs = self._specs
        self._order = sorted(self._indices, key=lambda i: (specs[i].arrival_s, specs[i].request_id))
        self._due = [self._t0 + specs[i].arrival_s for i in self._order]
        self._pos = 0
        self._set_next_due()
        self._pool.on_due = self._issue_due
        try:
            while self._pos < len(self._order) and not self._cap_reached:
                due = self._due[self._pos]
                if due > perf_counter():
                    await sleep_until(due, DEFAULT_SPIN_S)
                if not self._issue_due():  # stopped early to let the loop read: yield, then go on
                    await asyncio.sleep(0)
        finally:
            self._pool.on_due = None
            self._pool.next_due = math.inf

    def _issue_due(self) -> bool:
        """Issue the requests that are due now; False when it stopped after ``MAX_BURST_S`` with more due."""
        order, due_times, specs = self._order, self._due, self._specs
        n = len(order)
        started = now = perf_counter()
        try:
            while self._pos < n and due_times[self._pos] <= now:
                if len(self._inflight) >= self._cap:
                    self._cap_hit(specs[order[self._pos]].arrival_s, order[self._pos :])
                    self._pos = n
                    return True
                i = order[self._pos]
                self._pos += 1
                self._issue(i, specs[i].arrival_s)
                now = perf_counter()
                if now - started > MAX_BURST_S:
                    return False
            return True
        finally:
            self._set_next_due()

    def _set_next_due(self) -> None:
        self._pool.next_due = self._due[self._pos] if self._pos < len(self._due) else math.inf

    def _cap_hit(self, arrival_s: float, unsent: Sequence[int]) -> None:
        msg = f"outstanding-request cap {self._cap} hit at t={arrival_s:.1f} s; run marked invalid"
        log.warning("%s (%d requests not sent)", msg, len(unsent))
        self._cap_reached = True
        self._invalid.append(msg)
        for i in unsent:
            spec = self._specs[i]
            self._records[i] = unsent_record(spec, spec.arrival_s, "not sent: outstanding-request cap hit")

    async def _issue_closed(self) -> None:
        specs = self._specs
        order = sorted(self._indices, key=lambda i: specs[i].request_id)
        self._closed_next = iter(order)
        await sleep_until(self._t0, DEFAULT_SPIN_S)
        for _ in range(min(self._concurrency, len(order))):
            self._issue_next_closed(0.0)
        if len(order) <= self._concurrency:
            return
        assert self._all_issued is not None
        await self._all_issued.wait()

    def _issue_next_closed(self, arrival_s: float) -> None:
        assert self._closed_next is not None
        i = next(self._closed_next, None)
        if i is None:
            if self._all_issued is not None:
                self._all_issued.set()
            return
        self._issue(i, arrival_s)

    def _issue(self, i: int, arrival_s: float) -> None:
        ex = Exchange(i, self._specs[i], arrival_s, perf_counter(), self._on_done, self._on_retry)
        self._inflight[i] = ex
        self._send(ex)

    def _send(self, ex: Exchange) -> None:
        payload = self._payload(ex.index)
        pool = self._pool
        conn = pool.acquire_idle()
        if conn is not None:
            ex.conn = conn
            ex.sent = conn.send(payload, ex)
            if pool.n_idle < SPARE_CONNECTIONS:
                pool.ensure_spare(SPARE_CONNECTIONS)
            return
        self._send_new(ex, payload)

    def _send_new(self, ex: Exchange, payload: bytes) -> None:
        task = asyncio.get_running_loop().create_task(self._send_on_new(ex, payload))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_on_new(self, ex: Exchange, payload: bytes) -> None:
        try:
            conn = await self._pool.open()
        except (OSError, ConnectionError) as exc:
            ex.on_fail(f"connect failed: {exc}", perf_counter(), False)
            return
        if ex.finished:
            self._pool.release(conn)
            return
        ex.conn = conn
        ex.sent = conn.send(payload, ex)

    # -- exchange callbacks ------------------------------------------------------------------------------
    def _on_done(self, ex: Exchange) -> None:
        self._inflight.pop(ex.index, None)
        self._records[ex.index] = ex.to_record(self._t0)
        self._n_done += 1
        if self._mode == "closed" and not self._stopped:
            freed = ex.end if not math.isnan(ex.end) else perf_counter()
            self._issue_next_closed(freed - self._t0)
        if not self._inflight and not self._issuing and self._idle is not None:
            self._idle.set()

    def _on_retry(self, ex: Exchange) -> None:
        self._n_retries += 1
        ex.reset_for_retry()
        # on a new connection: the server that closed the idle one may have closed the other idle ones too,
        # and their close may not have reached us yet (the retry would die the same way, and not be retried)
        self._send_new(ex, self._payload(ex.index))

    async def _tick(self) -> None:
        """Fail requests past ``request_timeout_s`` and report progress, every ``TICK_S``."""
        while True:
            await asyncio.sleep(TICK_S)
            now = perf_counter()
            limit = now - self._timeout_s
            expired = []
            for ex in self._inflight.values():  # insertion order = issue order
                if ex.issued > limit:
                    break
                expired.append(ex)
            for ex in expired:
                ex.cut(RequestStatus.FAILED, f"timed out after {self._timeout_s:g} s", now)
            if self._on_tick is not None:
                self._on_tick(self._n_done)
