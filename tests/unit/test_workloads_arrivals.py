"""Arrival processes: rates, burstiness, closed loop, trace replay, and isolated seeded streams."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workloads.arrivals import RngStream, arrival_times, assign_arrivals, make_schedule, rng_stream
from workloads.config import ArrivalConfig
from workloads.errors import WorkloadConfigError

N = 6000


def _cv(times: np.ndarray) -> float:
    gaps = np.diff(times)
    return float(gaps.std() / gaps.mean())


def test_poisson_rate_and_cv():
    times, schedule = assign_arrivals(N, ArrivalConfig(kind="poisson", rate_rps=8.0, seed=1))
    assert times[0] == 0.0 and np.all(np.diff(times) >= 0)
    assert schedule.mode == "open" and schedule.concurrency is None
    assert schedule.offered_rate_rps == pytest.approx(8.0, rel=0.05)
    assert schedule.duration_s == pytest.approx(times[-1])
    assert _cv(times) == pytest.approx(1.0, abs=0.08)


@pytest.mark.parametrize("cv", [0.5, 1.0, 3.0])
def test_gamma_rate_and_measurable_cv(cv):
    times, schedule = assign_arrivals(N, ArrivalConfig(kind="gamma", rate_rps=4.0, cv=cv, seed=2))
    assert times[0] == 0.0
    assert schedule.offered_rate_rps == pytest.approx(4.0, rel=0.12)
    assert _cv(times) == pytest.approx(cv, rel=0.2)


def test_burstier_gamma_has_larger_cv():
    calm = arrival_times(N, ArrivalConfig(kind="gamma", rate_rps=4.0, cv=0.5))
    bursty = arrival_times(N, ArrivalConfig(kind="gamma", rate_rps=4.0, cv=4.0))
    assert _cv(bursty) > 4 * _cv(calm)


def test_closed_loop():
    times, schedule = assign_arrivals(5, ArrivalConfig(kind="closed_loop", concurrency=2))
    assert times.tolist() == [0.0] * 5
    assert schedule.mode == "closed" and schedule.concurrency == 2 and math.isnan(schedule.offered_rate_rps)


def test_trace_replay_scales_time():
    trace = np.array([0.0, 1.0, 3.0, 3.0, 10.0])
    times, schedule = assign_arrivals(5, ArrivalConfig(kind="trace", time_scale=0.5), trace)
    assert times.tolist() == [0.0, 0.5, 1.5, 1.5, 5.0]
    assert schedule.offered_rate_rps == pytest.approx(4 / 5.0) and schedule.duration_s == 5.0
    with pytest.raises(WorkloadConfigError, match="workload.arrival.kind: 'trace' needs trace timestamps"):
        arrival_times(5, ArrivalConfig(kind="trace"))
    with pytest.raises(ValueError, match="shape"):
        arrival_times(4, ArrivalConfig(kind="trace"), trace)


def test_degenerate_schedules():
    one = make_schedule(np.array([0.0]), ArrivalConfig(kind="poisson", rate_rps=1.0))
    assert math.isnan(one.offered_rate_rps) and one.duration_s == 0.0
    assert arrival_times(1, ArrivalConfig(kind="gamma", rate_rps=1.0)).tolist() == [0.0]
    assert arrival_times(0, ArrivalConfig(kind="poisson", rate_rps=1.0)).shape == (0,)


def test_seeds_and_streams_are_isolated():
    cfg = ArrivalConfig(kind="poisson", rate_rps=2.0, seed=7)
    assert np.array_equal(arrival_times(100, cfg), arrival_times(100, cfg))
    other = arrival_times(100, ArrivalConfig(kind="poisson", rate_rps=2.0, seed=8))
    assert not np.array_equal(arrival_times(100, cfg), other)
    a = rng_stream(7, RngStream.ARRIVALS).random(5)
    b = rng_stream(7, RngStream.GROUP_CHOICE).random(5)
    c = rng_stream(7, RngStream.INTERLEAVE).random(5)
    assert not np.array_equal(a, b) and not np.array_equal(b, c)
    assert np.array_equal(a, rng_stream(7, RngStream.ARRIVALS).random(5))


def test_global_numpy_rng_is_neither_used_nor_touched():
    cfg = ArrivalConfig(kind="gamma", rate_rps=2.0, cv=2.0, seed=3)
    np.random.seed(123)
    state = np.random.get_state()[1].copy()
    first = arrival_times(50, cfg)
    assert np.array_equal(np.random.get_state()[1], state)
    np.random.seed(999)
    assert np.array_equal(arrival_times(50, cfg), first)
