"""The load generator against the mock server run as a separate process: every record is timed on one
clock from its scheduled arrival (sent, first token, finish in that order), and the multi-process mode
returns every record on one shared time origin. How closely the times match the injected delays, and
how late requests leave, are speed targets: tests/bench/test_speed_targets.py."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from harness.loadgen import LoadGenOptions, TargetConfig, run_load
from harness.loadgen.mock_process import mock_server_process
from vocab.records import RequestSpec, RequestStatus
from workloads.arrivals import ArrivalSchedule

pytestmark = pytest.mark.integration  # a mock server process on loopback

TTFT_MS, ITL_MS, N_OUT = 20.0, 5.0, 6


def poisson(n: int, rate: float) -> tuple[list[RequestSpec], ArrivalSchedule, list[list[int]]]:
    rng = np.random.default_rng(7)
    times = np.concatenate([[0.0], np.cumsum(rng.exponential(1 / rate, n - 1))])
    specs = [RequestSpec(request_id=i, arrival_s=float(t), input_length=2, output_length=N_OUT) for i, t in enumerate(times)]
    return specs, ArrivalSchedule("open", None, rate, float(times[-1])), [[5, 6]] * n


def check_times(records: tuple, specs: list[RequestSpec]) -> None:
    assert [r.request_id for r in records] == [s.request_id for s in specs]
    assert all(r.status == RequestStatus.OK for r in records), [r.error for r in records if r.error]
    assert all(r.arrival_s == s.arrival_s for r, s in zip(records, specs, strict=True))
    # a client starved of CPU (the tests run two at a time) may read the last tokens in the same read as the first
    assert all(r.sent_s < r.first_token_s <= r.finish_s for r in records)
    assert all(r.n_out == N_OUT and len(r.chunk_times_s) == N_OUT for r in records)


def test_ttft_tpot_and_issue_lag_single_process() -> None:
    specs, schedule, prompts = poisson(60, 60.0)
    with mock_server_process(ttft_ms=TTFT_MS, itl_ms=ITL_MS) as server:
        before = time.time()
        result = run_load(specs, schedule, prompts, TargetConfig(server.url, "m"), LoadGenOptions(progress=False))
    check_times(result.records, specs)
    assert all(r.arrival_s <= r.sent_s for r in result.records)  # one clock: nothing leaves before it is due
    assert before < result.t0_wall < time.time()
    assert result.info["issue_lag_p99_ms"] is not None and result.info["n_sent"] == 60


def test_multi_process_merges_records_on_one_origin() -> None:
    specs, schedule, prompts = poisson(60, 60.0)
    options = LoadGenOptions(progress=False, n_processes=2, max_outstanding=64)
    with mock_server_process(ttft_ms=TTFT_MS, itl_ms=ITL_MS) as server:
        result = run_load(specs, schedule, prompts, TargetConfig(server.url, "m"), options)
    check_times(result.records, specs)
    assert result.info["n_processes"] == 2 and len(result.info["per_process"]) == 2
    assert result.info["n_sent"] == 60 and not result.invalid_reasons
    sent = [r.sent_s for r in result.records]
    assert not any(math.isnan(s) for s in sent)
    # both processes count from the same origin: a process on its own origin would be off by its start-up
    # (seconds); converting the shared wall-clock origin to each process's clock costs at most milliseconds
    assert min(s - r.arrival_s for s, r in zip(sent, result.records, strict=True)) > -0.25


def test_multi_process_closed_loop_and_cap_split() -> None:
    n = 30
    specs = [RequestSpec(request_id=i, arrival_s=0.0, input_length=2, output_length=2) for i in range(n)]
    schedule = ArrivalSchedule("closed", 4, math.nan, 0.0)
    options = LoadGenOptions(progress=False, n_processes=2)
    with mock_server_process(ttft_ms=2, itl_ms=1) as server:
        result = run_load(specs, schedule, [[1, 2]] * n, TargetConfig(server.url, "m"), options)
    assert len(result.records) == n and all(r.status == RequestStatus.OK for r in result.records)
    assert sorted(r.arrival_s for r in result.records)[:4] == [0.0] * 4
