"""Hand-computed checks of every metric in harness.metrics (definitions in docs/metrics.md)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from harness.metrics import (
    FRAME_COLUMNS,
    LATENCY_METRICS,
    PERCENTILE_METHOD,
    describe,
    percentile,
    percentiles,
    request_frame,
    run_duration_s,
    slo_mask,
    summarize,
    token_intervals_ms,
)
from harness.slo import SLOConfig
from vocab.records import RequestRecord, RequestStatus

NAN = float("nan")
approx = pytest.approx


def rec(
    rid: int,
    status: RequestStatus = RequestStatus.OK,
    *,
    arrival: float,
    sent: float | None = None,
    chunks: tuple[float, ...] = (),
    first: float | None = None,
    finish: float = NAN,
    n_out: int | None = None,
    input_length: int = 100,
    cached: int = -1,
    extra: dict[str, float] | None = None,
) -> RequestRecord:
    return RequestRecord(
        request_id=rid,
        status=status,
        arrival_s=arrival,
        sent_s=arrival if sent is None else sent,
        first_token_s=(chunks[0] if chunks else NAN) if first is None else first,
        finish_s=finish,
        input_length=input_length,
        output_length=64,
        n_out=len(chunks) if n_out is None else n_out,
        chunk_times_s=chunks,
        cached_tokens=cached,
        instance=f"i{rid % 2}",
        prefix_group=rid % 3,
        session_id=rid // 2,
        turn=rid % 2,
        extra=extra or {},
    )


def chunks_from_intervals(start: float, intervals_ms: list[float]) -> tuple[float, ...]:
    times = [start]
    for gap in intervals_ms:
        times.append(times[-1] + gap / 1000.0)
    return tuple(times)


# F: 12 intervals: ten of 10 ms, then 40 ms and 60 ms; ceil(12/10) = 2 slowest -> TBT = 50 ms.
F_CHUNKS = chunks_from_intervals(5.5, [10.0] * 10 + [40.0, 60.0])


@pytest.fixture
def records() -> list[RequestRecord]:
    """Six requests, one of each outcome, with hand-computed metrics (see the tests below)."""
    return [
        # A: TTFT 100, E2E 300, TPOT (300-100)/3, ITL [50, 100, 50], TBT 100, issue lag 1 ms.
        rec(0, arrival=0.0, sent=0.001, chunks=(0.1, 0.15, 0.25, 0.3), finish=0.3, input_length=100,
            cached=40, extra={"kv_transfer_s": 0.02}),
        # B: a single output token: TTFT = E2E = 200, no TPOT, no interval, no TBT.
        rec(1, arrival=1.0, chunks=(1.2,), finish=1.2, input_length=200),
        # C: failed, D: rejected, E: unfinished (it has a first token that would meet any TTFT bound).
        rec(2, RequestStatus.FAILED, arrival=2.0, finish=2.5, input_length=50, cached=50),
        rec(3, RequestStatus.REJECTED, arrival=3.0, finish=3.01),
        rec(4, RequestStatus.UNFINISHED, arrival=4.0, chunks=(4.1, 4.2)),
        # F: TTFT 500, E2E 700, TPOT 200/12, TBT 50, issue lag 2 ms.
        rec(5, arrival=5.0, sent=5.002, chunks=F_CHUNKS, finish=F_CHUNKS[-1], input_length=300,
            cached=150, extra={"queue_s": 0.25}),
    ]


# ---------------------------------------------------------------------------------------------
# percentile helper
# ---------------------------------------------------------------------------------------------


def test_percentile_linear_interpolation_hand_values() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([4, 1, 3, 2], 90) == approx(3.7)  # position 0.9 * 3 = 2.7 -> 3 + 0.7
    assert percentile([100, 200, 500], 99) == approx(494.0)  # 200 + 0.98 * 300
    assert percentile([7.0], 99) == 7.0
    assert percentile([1, 2, 3, 4], 0) == 1.0
    assert percentile([1, 2, 3, 4], 100) == 4.0


def test_percentile_drops_nan_and_empty_is_none() -> None:
    assert percentile([NAN, 1.0, 3.0], 50) == 2.0
    assert percentile([], 50) is None
    assert percentile([NAN, NAN], 99) is None
    assert percentiles([], [50, 99]) == [None, None]
    assert percentiles(np.array([1.0, 2.0, 3.0]), [0, 50, 100]) == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("q", [-1, 100.5])
def test_percentile_rejects_out_of_range_q(q: float) -> None:
    with pytest.raises(ValueError, match="percentile q"):
        percentile([1.0], q)


def test_describe_names_and_values() -> None:
    out = describe([100.0, 200.0, 500.0, NAN], "ttft_ms")
    assert out == {
        "mean_ttft_ms": approx(800 / 3),
        "median_ttft_ms": 200.0,
        "p90_ttft_ms": approx(440.0),
        "p99_ttft_ms": approx(494.0),
    }
    assert all(v is None for v in describe([], "x_ms").values())


# ---------------------------------------------------------------------------------------------
# per-request metrics
# ---------------------------------------------------------------------------------------------


def test_request_frame_hand_values(records: list[RequestRecord]) -> None:
    f = request_frame(records).set_index("request_id")
    a, b, f5 = f.loc[0], f.loc[1], f.loc[5]
    assert a.ttft_ms == approx(100.0)
    assert a.e2e_ms == approx(300.0)
    assert a.tpot_ms == approx(200.0 / 3)
    assert a.tbt_ms == approx(100.0)
    assert a.itl_count == 3
    assert a.issue_lag_ms == approx(1.0)
    assert a.status == "ok"

    assert b.ttft_ms == approx(200.0) and b.e2e_ms == approx(200.0)
    assert math.isnan(b.tpot_ms) and math.isnan(b.tbt_ms)
    assert b.itl_count == 0 and b.issue_lag_ms == 0.0

    assert f5.ttft_ms == approx(500.0) and f5.e2e_ms == approx(700.0)
    assert f5.tpot_ms == approx(200.0 / 12)
    assert f5.tbt_ms == approx(50.0)
    assert f5.itl_count == 12 and f5.issue_lag_ms == approx(2.0)


def test_request_frame_failed_and_zero_output(records: list[RequestRecord]) -> None:
    f = request_frame(records).set_index("request_id")
    c = f.loc[2]
    assert c.status == "failed" and c.n_out == 0 and c.itl_count == 0
    assert math.isnan(c.ttft_ms) and math.isnan(c.tpot_ms) and math.isnan(c.tbt_ms)
    assert c.e2e_ms == approx(500.0)
    assert f.loc[3].status == "rejected"
    assert f.loc[4].status == "unfinished" and math.isnan(f.loc[4].e2e_ms)


def test_request_frame_columns_and_extra(records: list[RequestRecord]) -> None:
    f = request_frame(records)
    assert list(f.columns) == [*FRAME_COLUMNS, "extra_kv_transfer_s", "extra_queue_s"]
    assert len(f) == 6
    assert f["extra_kv_transfer_s"].iloc[0] == 0.02
    assert np.isnan(f["extra_kv_transfer_s"].iloc[1:]).all()
    assert f["extra_queue_s"].iloc[5] == 0.25
    assert f["cached_tokens"].tolist() == [40, -1, 50, -1, -1, 150]
    assert f["instance"].tolist() == ["i0", "i1", "i0", "i1", "i0", "i1"]
    assert f["session_id"].tolist() == [0, 0, 1, 1, 2, 2]
    assert f["turn"].tolist() == [0, 1, 0, 1, 0, 1]
    assert f["prefix_group"].tolist() == [0, 1, 2, 0, 1, 2]
    assert f["input_length"].tolist() == [100, 200, 50, 100, 100, 300]


def test_request_frame_empty() -> None:
    f = request_frame([])
    assert len(f) == 0
    assert list(f.columns) == list(FRAME_COLUMNS)


def test_itl_pools_only_ok_requests(records: list[RequestRecord]) -> None:
    ok_itl = token_intervals_ms(records)
    assert ok_itl == approx([50.0, 100.0, 50.0] + [10.0] * 10 + [40.0, 60.0])
    # The unfinished request's 100 ms interval only appears when non-ok records are included.
    all_itl = token_intervals_ms(records, ok_only=False)
    assert len(all_itl) == 16 and all_itl[3] == approx(100.0)


def test_itl_does_not_straddle_records_or_skip_empty_ones() -> None:
    recs = [
        rec(0, arrival=0.0, chunks=(), n_out=0, finish=0.1),
        rec(1, arrival=0.0, chunks=(1.0, 1.5), finish=1.5),
        rec(2, arrival=0.0, chunks=(), n_out=0, finish=0.1),
        rec(3, arrival=0.0, chunks=(9.0,), finish=9.0),
        rec(4, arrival=0.0, chunks=(2.0, 2.25, 2.5), finish=2.5),
    ]
    assert token_intervals_ms(recs) == approx([500.0, 250.0, 250.0])
    f = request_frame(recs)
    assert f["itl_count"].tolist() == [0, 1, 0, 0, 2]
    assert f["tbt_ms"].tolist()[1] == approx(500.0)
    assert f["tbt_ms"].tolist()[4] == approx(250.0)


@pytest.mark.parametrize(
    ("n_intervals", "expected_tbt"),
    [
        (1, 1.0),  # ceil(0.1) = 1 interval
        (10, 10.0),  # ceil(1.0) = 1
        (11, 10.5),  # ceil(1.1) = 2 -> mean(10, 11)
        (30, 29.0),  # exactly 3 (float 0.1 * 30 would round up to 4 and give 28.5)
        (31, 29.5),  # ceil(3.1) = 4 -> mean(28..31)
    ],
)
def test_tbt_uses_ceil_of_ten_percent(n_intervals: int, expected_tbt: float) -> None:
    # intervals 1, 2, ..., n ms, shuffled so that the slowest are not simply the last ones
    gaps = list(np.random.default_rng(n_intervals).permutation(np.arange(1, n_intervals + 1)).astype(float))
    chunks = chunks_from_intervals(0.0, gaps)
    f = request_frame([rec(0, arrival=0.0, chunks=chunks, finish=chunks[-1])])
    assert f["tbt_ms"].iloc[0] == approx(expected_tbt, rel=1e-9)


def test_vectorised_metrics_match_per_request_reference() -> None:
    rng = np.random.default_rng(7)
    recs = []
    for i in range(300):
        k = int(rng.choice([0, 1, 2, 3, 9, 10, 11, 25, 40]))
        start = float(rng.uniform(0, 10))
        chunks = tuple(np.cumsum(rng.exponential(0.03, k)) + start) if k else ()
        recs.append(rec(i, arrival=start - 0.05, chunks=chunks, finish=chunks[-1] if k else NAN))
    f = request_frame(recs)
    for r, tbt, count in zip(recs, f["tbt_ms"], f["itl_count"], strict=True):
        gaps = np.diff(np.asarray(r.chunk_times_s)) * 1000.0
        assert count == len(gaps)
        if len(gaps) == 0:
            assert math.isnan(tbt)
        else:
            m = math.ceil(len(gaps) / 10)
            assert tbt == approx(np.sort(gaps)[::-1][:m].mean(), rel=1e-12)
    reference = np.concatenate([np.diff(np.asarray(r.chunk_times_s)) * 1000.0 for r in recs if r.chunk_times_s])
    assert token_intervals_ms(recs) == approx(reference, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# SLO mask and attainment
# ---------------------------------------------------------------------------------------------


def test_slo_mask_only_ok_requests_meet(records: list[RequestRecord]) -> None:
    f = request_frame(records)
    # TTFT <= 1000 ms holds for A, B, F and for the unfinished E (100 ms), but E is not ok.
    assert slo_mask(f, SLOConfig(ttft_ms=1000)).tolist() == [True, True, False, False, False, True]
    # No bounds: every ok request meets, nothing else does.
    assert slo_mask(f, SLOConfig()).tolist() == [True, True, False, False, False, True]


def test_slo_mask_per_bound(records: list[RequestRecord]) -> None:
    f = request_frame(records)
    # TTFT 250: A (100) and B (200) meet; F (500) does not.
    assert slo_mask(f, SLOConfig(ttft_ms=250)).tolist() == [True, True, False, False, False, False]
    # TPOT 20: A (66.7) fails, B meets vacuously (n_out = 1), F (16.7) meets.
    assert slo_mask(f, SLOConfig(tpot_ms=20)).tolist() == [False, True, False, False, False, True]
    # TBT 60: A (100) fails, B vacuous, F (50) meets.
    assert slo_mask(f, SLOConfig(tbt_ms=60)).tolist() == [False, True, False, False, False, True]
    # E2E 250: only B (200).
    assert slo_mask(f, SLOConfig(e2e_ms=250)).tolist() == [False, True, False, False, False, False]
    # All bounds together must hold at once.
    both = SLOConfig(ttft_ms=600, tpot_ms=20, tbt_ms=60, e2e_ms=800)
    assert slo_mask(f, both).tolist() == [False, True, False, False, False, True]


def test_slo_bound_is_inclusive() -> None:
    # 0.25 s and 0.75 s are exact in binary: TTFT = 250 ms, E2E = 750 ms exactly.
    f = request_frame([rec(0, arrival=0.0, chunks=(0.25, 0.5, 0.75), finish=0.75)])
    assert slo_mask(f, SLOConfig(ttft_ms=250, e2e_ms=750)).tolist() == [True]
    assert slo_mask(f, SLOConfig(ttft_ms=249.999)).tolist() == [False]


def test_per_token_bounds_need_intervals_when_n_out_above_one() -> None:
    # Two tokens delivered in one chunk: TPOT is defined, TBT is not, and a TBT bound is violated.
    f = request_frame([rec(0, arrival=0.0, chunks=(0.1,), n_out=2, finish=0.1)])
    assert f["tpot_ms"].iloc[0] == approx(0.0)
    assert slo_mask(f, SLOConfig(tpot_ms=10)).tolist() == [True]
    assert slo_mask(f, SLOConfig(tbt_ms=10)).tolist() == [False]


def test_zero_output_ok_request() -> None:
    # n_out = 0 has no first token: TTFT is undefined and violates a TTFT bound; TPOT/TBT are vacuous.
    f = request_frame([rec(0, arrival=0.0, chunks=(), n_out=0, finish=0.2)])
    assert math.isnan(f["ttft_ms"].iloc[0]) and math.isnan(f["tpot_ms"].iloc[0])
    assert slo_mask(f, SLOConfig(ttft_ms=1000)).tolist() == [False]
    assert slo_mask(f, SLOConfig(tpot_ms=1, tbt_ms=1)).tolist() == [True]


def test_slo_mask_empty_frame() -> None:
    mask = slo_mask(request_frame([]), SLOConfig(ttft_ms=100))
    assert mask.dtype == bool and mask.size == 0


# ---------------------------------------------------------------------------------------------
# summarize
# ---------------------------------------------------------------------------------------------


def test_summary_counts_duration_and_throughput(records: list[RequestRecord]) -> None:
    s = summarize(records, SLOConfig(ttft_ms=250, tpot_ms=70))
    assert (s["n_issued"], s["n_ok"], s["n_failed"], s["n_rejected"], s["n_unfinished"]) == (6, 3, 1, 1, 1)
    assert s["error_rate"] == approx(1 / 6)
    # earliest scheduled arrival 0.0 to latest finish 5.7 (F)
    assert s["duration_s"] == approx(5.7)
    assert s["request_throughput_rps"] == approx(3 / 5.7)
    assert s["output_throughput_tps"] == approx((4 + 1 + 13) / 5.7)
    assert s["input_throughput_tps"] == approx((100 + 200 + 300) / 5.7)
    assert (s["n_output_tokens"], s["n_input_tokens"]) == (18, 600)


def test_summary_latency_statistics(records: list[RequestRecord]) -> None:
    s = summarize(records, SLOConfig())
    # TTFT over ok requests [100, 200, 500]; the unfinished request's 100 ms is excluded.
    assert s["mean_ttft_ms"] == approx(800 / 3)
    assert s["median_ttft_ms"] == approx(200.0)
    assert s["p90_ttft_ms"] == approx(440.0)
    assert s["p99_ttft_ms"] == approx(494.0)
    # TPOT over [200/3, 200/12] (B has none)
    assert s["mean_tpot_ms"] == approx((200 / 3 + 200 / 12) / 2)
    assert s["median_tpot_ms"] == approx((200 / 3 + 200 / 12) / 2)
    # E2E over [300, 200, 700]
    assert s["mean_e2e_ms"] == approx(400.0) and s["median_e2e_ms"] == approx(300.0)
    # ITL pooled: ten 10s, 40, 50, 50, 60, 100 (15 intervals)
    assert s["mean_itl_ms"] == approx(400 / 15)
    assert s["median_itl_ms"] == approx(10.0)
    assert s["p90_itl_ms"] == approx(56.0)  # position 12.6 -> 50 + 0.6 * 10
    assert s["p99_itl_ms"] == approx(94.4)  # position 13.86 -> 60 + 0.86 * 40
    # TBT over [100, 50]
    assert s["mean_tbt_ms"] == approx(75.0) and s["p99_tbt_ms"] == approx(99.5)
    # issue lag over ok requests [1, 0, 2]
    assert s["mean_issue_lag_ms"] == approx(1.0) and s["median_issue_lag_ms"] == approx(1.0)
    for name in LATENCY_METRICS:
        assert {f"mean_{name}", f"median_{name}", f"p90_{name}", f"p99_{name}"} <= s.keys()
    assert "linear" in s["percentile_method"] and s["percentile_method"] == PERCENTILE_METHOD


def test_summary_attainment_counts_all_issued_and_goodput(records: list[RequestRecord]) -> None:
    slo = SLOConfig(name="t", ttft_ms=250, tpot_ms=70, attainment_target=0.3)
    s = summarize(records, slo, n_gpus=4)
    # A and B meet; F misses TTFT; failed, rejected and unfinished are violations.
    assert s["n_slo_met"] == 2
    assert s["slo_attainment"] == approx(2 / 6)
    assert s["meets_attainment_target"] is True
    assert s["goodput_rps"] == approx(2 / 5.7)
    assert s["goodput_rps_per_gpu"] == approx(2 / 5.7 / 4)
    assert s["request_throughput_rps_per_gpu"] == approx(3 / 5.7 / 4)
    assert s["n_gpus"] == 4 and s["slo_name"] == "t"

    strict = summarize(records, SLOConfig(ttft_ms=1000, attainment_target=0.9))
    # every ok request meets, yet attainment is 3 / 6, not 3 / 3
    assert strict["slo_attainment"] == approx(0.5)
    assert strict["meets_attainment_target"] is False


def test_summary_cache_hit_fraction(records: list[RequestRecord]) -> None:
    # ok requests that report: A 40/100 and F 150/300; B does not report; the failed C is excluded.
    assert summarize(records, SLOConfig())["cache_hit_fraction"] == approx(190 / 400)
    unreported = [rec(0, arrival=0.0, chunks=(0.1,), finish=0.1)]
    assert summarize(unreported, SLOConfig())["cache_hit_fraction"] is None


def test_summary_is_json_without_nan(records: list[RequestRecord]) -> None:
    s = summarize(records, SLOConfig(ttft_ms=250))
    text = json.dumps(s, allow_nan=False)
    assert json.loads(text) == s
    assert all(not isinstance(v, float) or math.isfinite(v) for v in s.values())


def test_summary_empty_input() -> None:
    s = summarize([], SLOConfig(ttft_ms=100))
    assert s["n_issued"] == 0 and s["n_ok"] == 0
    assert s["duration_s"] is None
    assert s["error_rate"] is None and s["slo_attainment"] is None
    assert s["meets_attainment_target"] is False
    assert s["goodput_rps"] is None and s["request_throughput_rps"] is None
    assert s["cache_hit_fraction"] is None
    for name in LATENCY_METRICS:
        assert s[f"mean_{name}"] is None and s[f"p99_{name}"] is None
    json.dumps(s, allow_nan=False)


def test_summary_only_failures_has_null_latencies() -> None:
    recs = [rec(i, RequestStatus.FAILED, arrival=float(i), finish=float(i) + 0.5) for i in range(3)]
    s = summarize(recs, SLOConfig(ttft_ms=100))
    assert s["n_failed"] == 3 and s["error_rate"] == 1.0
    assert s["slo_attainment"] == 0.0 and s["goodput_rps"] == 0.0
    assert s["duration_s"] == approx(2.5)
    assert s["p99_ttft_ms"] is None and s["mean_itl_ms"] is None


def test_duration_falls_back_to_send_time_when_nothing_finished() -> None:
    recs = [
        rec(0, RequestStatus.REJECTED, arrival=1.0, sent=1.5),
        rec(1, RequestStatus.UNFINISHED, arrival=2.0, sent=2.5, chunks=(2.6,)),
    ]
    assert run_duration_s(recs) == approx(1.5)
    assert summarize(recs, SLOConfig())["duration_s"] == approx(1.5)
    assert run_duration_s([]) is None


def test_duration_uses_latest_finish_of_any_status() -> None:
    recs = [
        rec(0, arrival=1.0, chunks=(1.1,), finish=1.1),
        rec(1, RequestStatus.FAILED, arrival=1.5, finish=4.0),
    ]
    assert run_duration_s(recs) == approx(3.0)


@pytest.mark.parametrize("n_gpus", [0, -1, 1.5, True])
def test_summary_rejects_bad_gpu_count(n_gpus: object) -> None:
    with pytest.raises(ValueError, match="n_gpus"):
        summarize([], SLOConfig(), n_gpus=n_gpus)  # type: ignore[arg-type]


def test_summary_accepts_plain_string_status() -> None:
    # Records rebuilt from parquet may carry the status as a plain string.
    r = rec(0, arrival=0.0, chunks=(0.1, 0.2), finish=0.2)
    r2 = RequestRecord(**{**{f: getattr(r, f) for f in r.__slots__}, "status": "ok"})  # type: ignore[arg-type]
    s = summarize([r2], SLOConfig(ttft_ms=150))
    assert s["n_ok"] == 1 and s["slo_attainment"] == 1.0


def test_achieved_issue_rate_from_send_times(records: list[RequestRecord]) -> None:
    # Sends at 0.001, 1, 2, 3, 4, 5.002: five gaps over 5.001 s.
    summary = summarize(records, SLOConfig())
    assert summary["achieved_issue_rate_rps"] == approx(5 / 5.001)
    assert summarize(records[:1], SLOConfig())["achieved_issue_rate_rps"] is None
