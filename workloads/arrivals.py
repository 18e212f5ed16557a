"""Arrival processes (trace replay, Poisson, Gamma, closed loop) and the isolated RNG streams of a workload.

Every random draw of a workload comes from ``rng_stream(seed, stream)``: a generator seeded by
``SeedSequence([seed, stream])``, one stream per purpose, so changing the arrival seed never changes the
prompts and vice versa. Nothing here touches a global RNG.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum
from typing import Optional

import numpy as np

from workloads.config import ArrivalConfig
from workloads.errors import WorkloadConfigError


class RngStream(IntEnum):
    """Purpose of a random stream; the value is mixed into the seed sequence (never reuse one)."""

    ARRIVALS = 1  # inter-arrival gaps
    GROUP_CHOICE = 2  # shared-prefix group of each session (Zipf)
    INTERLEAVE = 3  # order of sessions' turns
    SAMPLE = 4  # which rows of a length table are kept, in which order (ShareGPT lengths)


def rng_stream(seed: int, stream: RngStream) -> np.random.Generator:
    """An independent generator for one purpose of one seed."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(stream)]))


@dataclass(frozen=True)
class ArrivalSchedule:
    """How the requests of a workload are issued.

    ``mode`` is "open" (each request at its ``arrival_s``) or "closed" (``concurrency`` requests in
    flight, the next sent when one finishes). ``offered_rate_rps`` = (n-1) / (last - first arrival) for an
    open schedule, nan for a closed one or fewer than two requests (or all at the same instant).
    ``duration_s`` = last - first arrival (0.0 for a closed schedule).
    """

    mode: str
    concurrency: Optional[int]
    offered_rate_rps: float
    duration_s: float


def _open_loop_gaps(n: int, cfg: ArrivalConfig) -> np.ndarray:
    rng = rng_stream(cfg.seed, RngStream.ARRIVALS)
    assert cfg.rate_rps is not None  # checked by ArrivalConfig.validate
    mean_gap = 1.0 / float(cfg.rate_rps)
    if cfg.kind == "poisson":
        return rng.exponential(mean_gap, size=n - 1)
    shape = 1.0 / (float(cfg.cv) ** 2)
    return rng.gamma(shape, mean_gap / shape, size=n - 1)


def arrival_times(n: int, cfg: ArrivalConfig, trace_times_s: Optional[np.ndarray] = None) -> np.ndarray:
    """Scheduled arrival times (seconds, float64, non-decreasing) of ``n`` requests.

    ``trace``: ``trace_times_s * time_scale`` (``trace_times_s`` is required); ``poisson``/``gamma``: the
    first request at 0, then independent gaps with mean ``1/rate_rps``; ``closed_loop``: all 0.0.
    """
    cfg.validate()
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if cfg.kind == "trace":
        if trace_times_s is None:
            raise WorkloadConfigError(
                "workload.arrival.kind: 'trace' needs trace timestamps, which this workload does not have; "
                "use poisson, gamma or closed_loop"
            )
        times = np.asarray(trace_times_s, dtype=np.float64)
        if times.shape != (n,):
            raise ValueError(f"trace_times_s has shape {times.shape}, expected ({n},)")
        with np.errstate(over="ignore", invalid="ignore"):
            scaled = times * float(cfg.time_scale)
        if not np.isfinite(scaled).all():
            raise WorkloadConfigError(
                f"workload.arrival.time_scale: {cfg.time_scale!r} times the trace's timestamps (up to "
                f"{float(np.max(np.abs(times[np.isfinite(times)]), initial=0.0)):g} s) is not a finite time; use a smaller time_scale")
        return scaled
    if cfg.kind == "closed_loop" or n == 0:
        return np.zeros(n, dtype=np.float64)
    times = np.zeros(n, dtype=np.float64)
    np.cumsum(_open_loop_gaps(n, cfg), out=times[1:])
    return times


def make_schedule(times: np.ndarray, cfg: ArrivalConfig) -> ArrivalSchedule:
    """The schedule summary of arrival ``times`` produced under ``cfg``."""
    if cfg.kind == "closed_loop":
        return ArrivalSchedule(
            mode="closed", concurrency=cfg.concurrency, offered_rate_rps=math.nan, duration_s=0.0
        )
    n = len(times)
    duration = float(times[-1] - times[0]) if n else 0.0
    rate = (n - 1) / duration if n >= 2 and duration > 0 else math.nan
    return ArrivalSchedule(mode="open", concurrency=None, offered_rate_rps=rate, duration_s=duration)


def assign_arrivals(
    n: int, cfg: ArrivalConfig, trace_times_s: Optional[np.ndarray] = None
) -> tuple[np.ndarray, ArrivalSchedule]:
    """``arrival_times`` and ``make_schedule`` in one call."""
    times = arrival_times(n, cfg, trace_times_s)
    return times, make_schedule(times, cfg)
