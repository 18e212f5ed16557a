"""Loads sized to the host: measure a real deployment's saturation rate on the machine that runs it, then offer
fractions of it (``sweep.saturation_fractions``).

A fixed rate in a preset overloads a slow host and idles a fast one (a 1,088-token prefill of the tiny
model took 81 ms on one 2-core machine and 450-525 ms on another), so real CPU experiments do not fix
rates. Before the measured points, the deployment serves the workload's first ``sweep.saturation_requests``
requests in a closed loop with ``sweep.saturation_concurrency`` in flight; its saturation rate is the completion
rate over the steady stretch (from the ``concurrency``-th to the ``n - concurrency``-th completion, leaving out
the ramp-up and the drain). Each point then offers ``fraction x saturation rate`` for about
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
from systems.contract import Deployment, JobFolder
from vocab.errors import ConfigError
from vocab.records import RequestRecord, RequestStatus
from workloads.base import WorkloadRequests
from workloads.config import WorkloadConfig
from workloads.load_point import workload_at
from workloads.registry import build_workload

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MeasuredSaturation:
    """The saturation point's outcome: completions per second over the steady stretch."""

    saturation_rps: float
    concurrency: int
    n_requests: int
    n_ok: int
    steady_s: float

    def as_row(self) -> dict[str, Any]:
        return {"saturation_rps": self.saturation_rps, "saturation_concurrency": self.concurrency,
                "saturation_requests": self.n_requests, "saturation_ok": self.n_ok, "saturation_steady_s": self.steady_s}


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


def saturation_requests(cfg: Config, workload: WorkloadConfig) -> WorkloadRequests:
    """The saturation point's requests: ``workload``'s first ``sweep.saturation_requests`` in a closed loop of
    ``sweep.saturation_concurrency``. Refuses what cannot be sized, before anything starts: the simulator, or a
    workload with too few requests."""
    if cfg.engine.name == "sim":
        raise ConfigError("sweep.saturation_fractions: sizes real runs to the saturation rate measured on this host; "
                          "the simulator takes fixed sweep.rates_rps")
    arrival = dataclasses.replace(workload.arrival, kind="closed_loop", concurrency=cfg.sweep.saturation_concurrency,
                                  rate_rps=None)
    closed = dataclasses.replace(workload, arrival=arrival, max_requests=cfg.sweep.saturation_requests)
    requests = build_workload(closed, data_dir=cfg.data_dir).requests()
    if len(requests.specs) < cfg.sweep.saturation_requests:
        raise ConfigError(f"sweep.saturation_requests: the workload has only {len(requests.specs)} requests, the "
                          f"saturation point needs {cfg.sweep.saturation_requests}; make the workload longer or lower "
                          "sweep.saturation_requests")
    return requests


def measure_saturation(deployment: Deployment, requests: WorkloadRequests, cfg: Config,
                       folder: JobFolder) -> MeasuredSaturation:
    """Serve the saturation point's ``requests`` (:func:`saturation_requests`) and return the steady completion
    rate (``RuntimeError`` when it is not measurable)."""
    log.info("saturation point: %d requests, %d in flight", len(requests.specs), cfg.sweep.saturation_concurrency)
    result = deployment.run_point(requests, folder)
    rate, span = steady_completion_rate(result.records, cfg.sweep.saturation_concurrency)
    n_ok = sum(r.status == RequestStatus.OK for r in result.records)
    if not rate > 0:
        raise RuntimeError(f"saturation point: only {n_ok} of {len(result.records)} requests completed, too few to "
                           f"measure a steady completion rate with {cfg.sweep.saturation_concurrency} in flight")
    log.info("measured saturation rate: %.3f req/s (%d in flight, steady over %.1f s)", rate,
             cfg.sweep.saturation_concurrency, span)
    return MeasuredSaturation(rate, cfg.sweep.saturation_concurrency, len(result.records), n_ok, span)


def point_request_count(cfg: Config, rate_rps: float) -> int:
    """Requests of a point sized to the saturation rate, at ``rate_rps``."""
    wanted = math.ceil(rate_rps * cfg.sweep.point_duration_s)
    return int(min(max(wanted, cfg.sweep.min_point_requests), cfg.sweep.max_point_requests))


def sized_points(cfg: Config, workload: WorkloadConfig,
                 saturation: MeasuredSaturation) -> list[tuple[float, WorkloadRequests]]:
    """(rate, requests) of every ``sweep.saturation_fractions`` point of ``workload`` against the measured
    saturation rate."""
    points = []
    for fraction in cfg.sweep.saturation_fractions:
        rate = fraction * saturation.saturation_rps
        wcfg = workload_at(workload, rate_rps=rate, max_requests=point_request_count(cfg, rate),
                           rate_key="sweep.saturation_fractions")
        points.append((rate, build_workload(wcfg, data_dir=cfg.data_dir).requests()))
    return points
