"""Runs one schedule split across worker processes that share the run's origin t0.

Request i goes to process i % n. Each worker prepares (encodes its requests, opens connections) and says
so; the parent then picks a wall-clock t0 and sends it to all of them, and each converts it to its own
monotonic clock. The outstanding-request cap and a closed loop's concurrency are split across the
workers. Workers are spawned (not forked) and always stopped before this returns.
"""

from __future__ import annotations

import asyncio
import logging
import math
import multiprocessing as mp
import time
import traceback
from collections.abc import Sequence
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

from harness.loadgen.config import LoadGenOptions, LoadResult, TargetConfig
from harness.loadgen.loops import loop_factory
from harness.loadgen.progress import Progress
from harness.loadgen.runner import START_DELAY_S, LoadRunner, issue_lag_stats_ms
from vocab.records import RequestSpec
from workloads.arrivals import ArrivalSchedule

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 300.0
POLL_S = 0.2


def split_evenly(total: int, n: int) -> list[int]:
    """``total`` split into ``n`` parts that differ by at most one (larger parts first)."""
    return [total // n + (1 if k < total % n else 0) for k in range(n)]


def _worker(
    conn: Connection,
    specs: list[RequestSpec],
    prompts: list[Sequence[int]],
    schedule: ArrivalSchedule,
    target: TargetConfig,
    options: LoadGenOptions,
    cap: int,
    concurrency: int,
    counts: Any,
    slot: int,
) -> None:
    def tick(n_done: int) -> None:
        counts[slot] = n_done

    async def main() -> LoadResult:
        runner = LoadRunner(
            specs, schedule, prompts, target, options,
            max_outstanding=cap, concurrency=concurrency or None, on_tick=tick,
        )
        await runner.prepare()
        conn.send(("ready", None))
        t0_wall = conn.recv()  # blocks the idle loop until the parent starts the run
        return await runner.run(t0_wall)

    try:
        with asyncio.Runner(loop_factory=loop_factory()) as loop_runner:
            result = loop_runner.run(main())
        conn.send(("result", result))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def _receive(conn: Connection, proc: Any, kind: str, deadline: float) -> Any:
    while not conn.poll(POLL_S):
        if not proc.is_alive():
            raise RuntimeError(f"load-generator worker {proc.pid} exited with code {proc.exitcode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"load-generator worker {proc.pid} sent no {kind!r} in time")
    what, payload = conn.recv()
    if what == "error":
        raise RuntimeError(f"load-generator worker {proc.pid} failed:\n{payload}")
    if what != kind:
        raise RuntimeError(f"load-generator worker {proc.pid} sent {what!r}, expected {kind!r}")
    return payload


def run_multiprocess(
    specs: Sequence[RequestSpec],
    schedule: ArrivalSchedule,
    prompts: Sequence[Sequence[int]],
    target: TargetConfig,
    options: LoadGenOptions,
) -> LoadResult:
    """Run the schedule on ``options.n_processes`` worker processes and merge their records."""
    if len(prompts) != len(specs):
        raise ValueError(f"{len(prompts)} prompts for {len(specs)} specs")
    n = max(1, min(options.n_processes, len(specs)))
    concurrencies = [0] * n
    if schedule.mode == "closed":
        if not schedule.concurrency or schedule.concurrency < 1:
            raise ValueError(f"a closed schedule needs concurrency >= 1, got {schedule.concurrency}")
        n = min(n, schedule.concurrency)
        concurrencies = split_evenly(schedule.concurrency, n)
    caps = [max(1, c) for c in split_evenly(options.max_outstanding, n)]
    worker_options = replace(options, n_processes=1, progress=False)
    ctx = mp.get_context("spawn")
    counts = ctx.Array("q", n, lock=False)
    procs: list[Any] = []
    pipes: list[Connection] = []
    progress = Progress(len(specs), options.progress)
    try:
        for k in range(n):
            share = range(k, len(specs), n)
            parent_end, child_end = ctx.Pipe()
            proc = ctx.Process(
                target=_worker,
                args=(
                    child_end, [specs[i] for i in share], [prompts[i] for i in share], schedule, target,
                    worker_options, caps[k], concurrencies[k], counts, k,
                ),
                name=f"loadgen-{k}",
                daemon=True,
            )
            proc.start()
            child_end.close()
            procs.append(proc)
            pipes.append(parent_end)
        deadline = time.monotonic() + READY_TIMEOUT_S
        for conn, proc in zip(pipes, procs, strict=False):
            _receive(conn, proc, "ready", deadline)
        t0_wall = time.time() + START_DELAY_S + 0.01 * n
        for conn in pipes:
            conn.send(t0_wall)
        results: list[LoadResult] = []
        for conn, proc in zip(pipes, procs, strict=False):
            while not conn.poll(POLL_S):
                progress.update(sum(counts))
                if not proc.is_alive():
                    break
            results.append(_receive(conn, proc, "result", math.inf))
        progress.update(sum(counts))
    finally:
        progress.close()
        for proc in procs:
            proc.join(timeout=5.0)
            if proc.is_alive():
                log.warning("stopping load-generator worker %d", proc.pid)
                proc.terminate()
                proc.join(timeout=5.0)
        for conn in pipes:
            conn.close()
    records = tuple(sorted((r for res in results for r in res.records), key=lambda r: r.request_id))
    reasons = tuple(f"process {k}: {reason}" for k, res in enumerate(results) for reason in res.invalid_reasons)
    info: dict[str, Any] = {
        "client": results[0].info.get("client"),
        "event_loop": results[0].info.get("event_loop"),
        "mode": schedule.mode,
        "n_processes": n,
        "n_requests": len(records),
        "n_sent": sum(res.info.get("n_sent", 0) for res in results),
        "connections_opened": sum(res.info.get("connections_opened", 0) for res in results),
        "retries": sum(res.info.get("retries", 0) for res in results),
        "run_s": max(res.info.get("run_s", 0.0) for res in results),
        **issue_lag_stats_ms(records),
        "per_process": [res.info for res in results],
    }
    return LoadResult(records=records, invalid_reasons=reasons, t0_wall=t0_wall, info=info)
