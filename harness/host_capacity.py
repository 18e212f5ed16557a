"""Loads sized to the host: measure a real deployment's capacity on the machine that runs it, then offer
fractions of it (``sweep.capacity_fractions``).

A fixed rate in a preset overloads a slow host and idles a fast one (a 1,088-token prefill of the tiny
model took 81 ms on one 2-core machine and 450-525 ms on another), so real CPU experiments do not fix
rates. Before the measured points, the deployment serves the workload's first ``sweep.capacity_requests``
requests in a closed loop with ``sweep.capacity_concurrency`` in flight; its capacity is the completion
rate over the steady stretch (from the ``concurrency``-th to the ``n - concurrency``-th completion, leaving out
the ramp-up and the drain). Each point then offers ``fraction x capacity`` for about
``sweep.point_duration_s`` seconds (``rate x duration`` requests, within ``sweep.min_point_requests`` and
``sweep.max_point_requests``, never more than the workload has).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.config import Config
from harness.errors import ConfigError
from harness.records import RequestRecord, RequestStatus
from systems.contract import Deployment, JobFolder
from workloads.base import WorkloadRequests
from workloads.config import WorkloadConfig
from workloads.load_point import workload_at
from workloads.registry import build_workload, to_workload_config

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MeasuredCapacity:
    """The capacity point's outcome: completions per second over the steady stretch."""

    capacity_rps: float
    concurrency: int
    n_requests: int
    n_ok: int
    steady_s: float

    def as_row(self) -> dict[str, Any]:
        return {"capacity_rps": self.capacity_rps, "capacity_concurrency": self.concurrency,
                "capacity_requests": self.n_requests, "capacity_ok": self.n_ok, "capacity_steady_s": self.steady_s}


def steady_completion_rate(records: Sequence[RequestRecord], concurrency: int) -> tuple[float, float]:
    """(completions per second, seconds) between the ``concurrency``-th and the ``n - concurrency``-th
    completion of a closed-loop run; nan when fewer than ``2 * concurrency + 2`` requests completed."""
    finishes = np.sort([r.finish_s for r in records if r.status == RequestStatus.OK])
    n = len(finishes)
    lo, hi = concurrency, n - concurrency - 1
    if hi - lo < 1:
        return math.nan, math.nan
    start, end = float(finishes[lo]), float(finishes[hi])
    span = end - start
    completed = int(np.count_nonzero((finishes > start) & (finishes <= end)))  # ties (a batch) counted once each
    return (completed / span if span > 0 else math.nan), span


def capacity_workload(cfg: Config) -> WorkloadConfig:
    """The workload in a closed loop: its first ``sweep.capacity_requests`` requests, ``capacity_concurrency`` in flight."""
    wcfg = to_workload_config(cfg.workload)
    arrival = dataclasses.replace(wcfg.arrival, kind="closed_loop", concurrency=cfg.sweep.capacity_concurrency,
                                  rate_rps=None)
    return dataclasses.replace(wcfg, arrival=arrival, max_requests=cfg.sweep.capacity_requests)


def check_capacity_sizing(cfg: Config) -> None:
    """Refuse what cannot be sized before anything starts: the simulator, or a workload with too few requests."""
    if not cfg.sweep.capacity_fractions:
        return
    if cfg.engine.name == "sim":
        raise ConfigError("sweep.capacity_fractions: sizes real runs to the capacity measured on this host; the "
                          "simulator takes fixed sweep.rates_rps")
    n = len(build_workload(capacity_workload(cfg), data_dir=cfg.data_dir).requests().specs)
    if n < cfg.sweep.capacity_requests:
        raise ConfigError(f"sweep.capacity_requests: the workload has only {n} requests, the capacity point needs "
                          f"{cfg.sweep.capacity_requests}; make the workload longer or lower sweep.capacity_requests")


def measure_capacity(deployment: Deployment, cfg: Config, folder: JobFolder) -> MeasuredCapacity:
    """Serve the capacity workload and return the steady completion rate (``RuntimeError`` when it is not measurable)."""
    requests = build_workload(capacity_workload(cfg), data_dir=cfg.data_dir).requests()
    log.info("capacity point: %d requests, %d in flight", len(requests.specs), cfg.sweep.capacity_concurrency)
    result = deployment.run_point(requests, folder)
    rate, span = steady_completion_rate(result.records, cfg.sweep.capacity_concurrency)
    n_ok = sum(r.status == RequestStatus.OK for r in result.records)
    if not rate > 0:
        raise RuntimeError(f"capacity point: only {n_ok} of {len(result.records)} requests completed, too few to "
                           f"measure a steady completion rate with {cfg.sweep.capacity_concurrency} in flight")
    log.info("measured capacity: %.3f req/s (%d in flight, steady over %.1f s)", rate,
             cfg.sweep.capacity_concurrency, span)
    return MeasuredCapacity(rate, cfg.sweep.capacity_concurrency, len(result.records), n_ok, span)


def point_request_count(cfg: Config, rate_rps: float) -> int:
    """Requests of a capacity-sized point at ``rate_rps``."""
    wanted = math.ceil(rate_rps * cfg.sweep.point_duration_s)
    return int(min(max(wanted, cfg.sweep.min_point_requests), cfg.sweep.max_point_requests))


def sized_points(cfg: Config, capacity: MeasuredCapacity) -> list[tuple[float, WorkloadRequests]]:
    """(rate, requests) of every ``sweep.capacity_fractions`` point against the measured capacity."""
    points = []
    for fraction in cfg.sweep.capacity_fractions:
        rate = fraction * capacity.capacity_rps
        wcfg = workload_at(cfg.workload, rate_rps=rate, max_requests=point_request_count(cfg, rate),
                           rate_key="sweep.capacity_fractions")
        points.append((rate, build_workload(wcfg, data_dir=cfg.data_dir).requests()))
    return points
