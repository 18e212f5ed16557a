"""Bounded measurement work: the simulator's load sampling is capped whatever the run's length, and absurd
arrival parameters are refused at config validation (exit 2) instead of hanging the run."""

from __future__ import annotations

import math

import numpy as np
import pytest

from systems.sim.simulation import MAX_SAMPLE_TIMES, Simulation
from tests.unit.test_sim_simulation import colocated, run, spec
from vocab.errors import ConfigError
from workloads.arrivals import arrival_times
from workloads.config import CV_RANGE, RATE_RPS_RANGE, TIME_SCALE_RANGE, ArrivalConfig
from workloads.errors import WorkloadConfigError


def _sample_times(samples: list[dict]) -> list[float]:
    return sorted({s["time_s"] for s in samples})


def test_a_schedule_spanning_a_billion_seconds_samples_at_most_the_cap() -> None:
    records, sim = run(colocated(2, sample_interval_s=1.0), [spec(0, 0.0, 500, 4), spec(1, 1e9, 500, 4)])
    assert all(r.status.value == "ok" for r in records)
    times = _sample_times(sim.load_samples)
    assert 2 <= len(times) <= MAX_SAMPLE_TIMES
    assert len(sim.load_samples) == 2 * len(times)  # one row per instance and instant
    gaps = {round(b - a, 6) for a, b in zip(times, times[1:], strict=False)}
    assert len(gaps) == 1 and gaps.pop() >= 1e9 / MAX_SAMPLE_TIMES  # even spacing, widened to fit the cap
    assert times[-1] >= 1e9 - 2 * sim.info["load_sample_interval_s"]  # covers the whole run
    assert sim.info["load_sample_times"] == len(times)


def test_a_long_drain_thins_the_samples_and_keeps_them_even() -> None:
    # one long request at a tiny sampling interval: the run outlasts MAX_SAMPLE_TIMES instants
    records, sim = run(colocated(1, sample_interval_s=1e-3), [spec(0, 0.0, 100, 3000)])
    assert records[0].status.value == "ok"
    times = _sample_times(sim.load_samples)
    end = records[0].finish_s
    assert MAX_SAMPLE_TIMES // 2 <= len(times) <= MAX_SAMPLE_TIMES
    interval = sim.info["load_sample_interval_s"]
    assert interval > 1e-3 and math.log2(interval / 1e-3).is_integer()  # doubled, never drifted
    assert all(math.isclose(b - a, interval, rel_tol=1e-6) for a, b in zip(times, times[1:], strict=False))
    assert times[-1] <= end + interval


def test_a_non_finite_arrival_is_refused_by_the_simulator() -> None:
    with pytest.raises(ValueError, match="request 0: arrival_s must be a finite time"):
        Simulation(colocated()).run([spec(0, math.inf, 100, 2)])


@pytest.mark.parametrize(("key", "value", "bounds"), [
    ("time_scale", 1e308, TIME_SCALE_RANGE), ("time_scale", 0.0, TIME_SCALE_RANGE),
    ("time_scale", math.nan, TIME_SCALE_RANGE), ("rate_rps", 1e-300, RATE_RPS_RANGE),
    ("rate_rps", math.inf, RATE_RPS_RANGE), ("rate_rps", -1.0, RATE_RPS_RANGE), ("rate_rps", 1e300, RATE_RPS_RANGE),
    ("cv", 1e-200, CV_RANGE), ("cv", 1e9, CV_RANGE),
])
def test_absurd_arrival_parameters_name_the_option_and_the_range(key, value, bounds) -> None:
    kind = "trace" if key == "time_scale" else "gamma"
    kwargs = {"kind": kind, key: value} if kind == "trace" else {"kind": kind, "rate_rps": 1.0, key: value}
    with pytest.raises(WorkloadConfigError) as info:
        ArrivalConfig(**kwargs)
    assert str(info.value).startswith(f"workload.arrival.{key}: must be a finite number in [{bounds[0]:g}, {bounds[1]:g}]")


def test_time_scale_1e308_fails_at_validation_with_exit_code_2_error(compose) -> None:
    with pytest.raises(ConfigError, match=r"workload\.arrival\.time_scale: must be a finite number in \[1e-06, 10000\]"):
        compose(["workload=mooncake_conversation", "workload.arrival.time_scale=1e308"])
    with pytest.raises(ConfigError, match=r"sweep\.rates_rps: rates must be in \[0\.0001, 1e\+07\]"):
        compose(["workload.arrival.rate_rps=1", "sweep.rates_rps=[1e-300]"])
    with pytest.raises(ConfigError, match=r"engine\.sample_interval_s: must be a finite number >= 0\.001"):
        compose(["workload.arrival.rate_rps=1", "engine.sample_interval_s=1e-300"])


def test_trace_times_that_overflow_name_time_scale() -> None:
    with pytest.raises(WorkloadConfigError, match="workload.arrival.time_scale: 10000.0 times the trace's timestamps"):
        arrival_times(2, ArrivalConfig(kind="trace", time_scale=1e4), np.array([0.0, 1e305]))
