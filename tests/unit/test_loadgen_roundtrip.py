"""The load generator against the mock server (in a thread): records, outcomes, closed loop, cap, drain."""

from __future__ import annotations

import gc
import math
import socket

import pytest

from harness.loadgen import LoadGenOptions, TargetConfig, run_load
from harness.loadgen.mock_server import MockConfig, mock_server_thread
from vocab.records import RequestSpec, RequestStatus
from workloads.arrivals import ArrivalSchedule

pytestmark = pytest.mark.integration  # a mock server on loopback

NO_BAR = LoadGenOptions(progress=False, drain_timeout_s=10)


def open_specs(n: int, gap_s: float, n_out: int = 4) -> tuple[list[RequestSpec], ArrivalSchedule, list[list[int]]]:
    specs = [
        RequestSpec(request_id=i, arrival_s=i * gap_s, input_length=3, output_length=n_out,
                    prefix_group=i % 3, shared_prefix_len=2, session_id=i // 2, turn=i % 2)
        for i in range(n)
    ]
    rate = 1 / gap_s if gap_s > 0 else math.nan
    return specs, ArrivalSchedule("open", None, rate, (n - 1) * gap_s), [[7, 8, 9]] * n


def test_round_trip_records() -> None:
    specs, schedule, prompts = open_specs(20, 0.005, n_out=5)
    with mock_server_thread(MockConfig(ttft_ms=5, itl_ms=1, cached_tokens=2, instance="p0->d1")) as server:
        result = run_load(specs[::-1], schedule, prompts, TargetConfig(server.base_url, "m"), NO_BAR)
    assert result.invalid_reasons == ()
    assert gc.isenabled()  # paused during the run only
    assert [r.request_id for r in result.records] == list(range(20))
    assert result.info["n_sent"] == 20 and result.info["issue_lag_p99_ms"] is not None
    for rec in result.records:
        spec = specs[rec.request_id]
        assert rec.status == RequestStatus.OK, rec.error
        assert rec.arrival_s == spec.arrival_s
        assert rec.arrival_s <= rec.sent_s < rec.first_token_s <= rec.finish_s
        assert rec.n_out == 5 and len(rec.chunk_times_s) == 5 and rec.chunk_times_s[0] == rec.first_token_s
        assert list(rec.chunk_times_s) == sorted(rec.chunk_times_s)
        assert rec.cached_tokens == 2 and rec.instance == "p0->d1" and rec.error == ""
        assert (rec.input_length, rec.output_length) == (3, 5)
        assert (rec.prefix_group, rec.shared_prefix_len, rec.session_id, rec.turn) == (
            spec.prefix_group, spec.shared_prefix_len, spec.session_id, spec.turn)
    assert result.info["connections_opened"] <= 20


@pytest.mark.parametrize(
    ("config", "status", "error"),
    [
        (MockConfig(status=429), RequestStatus.REJECTED, "HTTP 429"),
        (MockConfig(status=500), RequestStatus.FAILED, "HTTP 500: "),
        (MockConfig(drop_after=2, itl_ms=1), RequestStatus.FAILED, "connection closed"),
    ],
)
def test_error_outcomes(config: MockConfig, status: RequestStatus, error: str) -> None:
    specs, schedule, prompts = open_specs(6, 0.002)
    with mock_server_thread(config) as server:
        result = run_load(specs, schedule, prompts, TargetConfig(server.base_url, "m"), NO_BAR)
    for rec in result.records:
        assert rec.status == status and error in rec.error, rec
        assert not math.isnan(rec.sent_s) and not math.isnan(rec.finish_s)
    if config.drop_after > 0:
        assert all(len(r.chunk_times_s) == 2 for r in result.records)


def test_keepalive_comments_crlf_and_extra_body() -> None:
    specs, schedule, prompts = open_specs(5, 0.002)
    with mock_server_thread(MockConfig(ping=True, crlf=True, itl_ms=1)) as server:
        options = LoadGenOptions(progress=False, extra_body={"mock": {"status": 200, "ttft_ms": 1}})
        result = run_load(specs, schedule, prompts, TargetConfig(server.base_url, "m", api_key="k"), options)
    assert all(r.status == RequestStatus.OK and r.n_out == 4 for r in result.records)


def test_server_closing_idle_connections_is_retried() -> None:
    specs, schedule, prompts = open_specs(30, 0.003)
    with mock_server_thread(MockConfig(ttft_ms=1, itl_ms=1, close_after_response=True)) as server:
        result = run_load(specs, schedule, prompts, TargetConfig(server.base_url, "m"), NO_BAR)
    assert all(r.status == RequestStatus.OK for r in result.records), [r.error for r in result.records]


def test_connection_refused_fails() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here
    specs, schedule, prompts = open_specs(3, 0.001)
    result = run_load(specs, schedule, prompts, TargetConfig(f"http://127.0.0.1:{port}", "m"), NO_BAR)
    assert all(r.status == RequestStatus.FAILED and "connect failed" in r.error for r in result.records)


def test_closed_loop_never_exceeds_concurrency() -> None:
    n, concurrency = 40, 4
    specs = [RequestSpec(request_id=i, arrival_s=0.0, input_length=3, output_length=3) for i in range(n)]
    schedule = ArrivalSchedule("closed", concurrency, math.nan, 0.0)
    with mock_server_thread(MockConfig(ttft_ms=2, itl_ms=1)) as server:
        result = run_load(specs, schedule, [[1, 2, 3]] * n, TargetConfig(server.base_url, "m"), NO_BAR)
        max_active = server.max_active
    assert max_active == concurrency
    assert all(r.status == RequestStatus.OK for r in result.records)
    events = sorted([(r.sent_s, 1) for r in result.records] + [(r.finish_s, -1) for r in result.records],
                    key=lambda e: (e[0], e[1]))
    active = peak = 0
    for _, step in events:
        active += step
        peak = max(peak, active)
    assert peak <= concurrency
    arrivals = sorted(r.arrival_s for r in result.records)
    assert arrivals[:concurrency] == [0.0] * concurrency and arrivals[concurrency] > 0
    finishes = {round(r.finish_s, 9) for r in result.records}
    assert all(round(a, 9) in finishes for a in arrivals[concurrency:])  # a slot frees at a finish
    assert all(r.sent_s >= r.arrival_s for r in result.records)


def test_outstanding_cap_stops_issuing_and_invalidates() -> None:
    specs, schedule, prompts = open_specs(20, 0.01)
    options = LoadGenOptions(progress=False, max_outstanding=5, drain_timeout_s=5)
    with mock_server_thread(MockConfig(ttft_ms=300, itl_ms=1)) as server:
        result = run_load(specs, schedule, prompts, TargetConfig(server.base_url, "m"), options)
    by_status = [r.status for r in result.records]
    assert by_status[:5] == [RequestStatus.OK] * 5
    assert by_status[5:] == [RequestStatus.UNFINISHED] * 15
    assert all(math.isnan(r.sent_s) and "cap" in r.error for r in result.records[5:])
    assert result.records[5].arrival_s == specs[5].arrival_s
    assert result.invalid_reasons == ("outstanding-request cap 5 hit at t=0.1 s; run marked invalid",)


def test_drain_deadline_cuts_in_flight_and_request_timeout_fails() -> None:
    specs, schedule, prompts = open_specs(3, 0.001)
    with mock_server_thread(MockConfig(ttft_ms=5, itl_ms=400)) as server:
        url = server.base_url
        cut = run_load(specs, schedule, prompts, TargetConfig(url, "m"), LoadGenOptions(progress=False, drain_timeout_s=0.2))
        slow = run_load(specs, schedule, prompts, TargetConfig(url, "m", request_timeout_s=0.2),
                        LoadGenOptions(progress=False, drain_timeout_s=5))
    for rec in cut.records:
        assert rec.status == RequestStatus.UNFINISHED and "drain deadline" in rec.error
        assert not math.isnan(rec.sent_s) and math.isnan(rec.finish_s) and len(rec.chunk_times_s) == 1
    for rec in slow.records:
        assert rec.status == RequestStatus.FAILED and "timed out" in rec.error


def test_run_load_async_on_a_running_loop_with_progress_bar() -> None:
    import asyncio

    from harness.loadgen import run_load_async

    specs, schedule, prompts = open_specs(8, 0.002)
    with mock_server_thread(MockConfig(ttft_ms=1, itl_ms=1)) as server:
        target = TargetConfig(server.base_url, "m")
        result = asyncio.run(run_load_async(specs, schedule, prompts, target, LoadGenOptions(progress=True)))
    assert [r.status for r in result.records] == [RequestStatus.OK] * 8
    assert result.info["event_loop"] == "asyncio"
