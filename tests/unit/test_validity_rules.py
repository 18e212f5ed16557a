"""The LoadGen-style validity rules: duration to the last scheduled arrival, unfinished requests, achieved
against offered issue rate, and the order-statistic confidence bounds of p90/p99 TTFT and TPOT (checked
against a brute-force binomial calculation). Each rule has a run that passes and one that must fail."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from harness.metrics import summarize
from harness.slo import SLOConfig
from harness.validity import (
    ValidityConfig,
    assess_validity,
    block_reasons,
    combine_validity,
    min_samples_to_bound,
    quantile_bound,
    quantile_ci_ranks,
)
from vocab.records import RequestRecord, RequestStatus

NAN = float("nan")


def rec(rid: int, arrival: float, *, status: RequestStatus = RequestStatus.OK, lag_s: float = 0.0,
        ttft_s: float = 0.1, tpot_s: float = 0.01, n_out: int = 5) -> RequestRecord:
    ok = status == RequestStatus.OK
    sent = arrival + lag_s
    chunks = tuple(arrival + ttft_s + tpot_s * k for k in range(n_out)) if ok else ()
    return RequestRecord(request_id=rid, status=status, arrival_s=arrival, sent_s=sent,
                         first_token_s=chunks[0] if ok else NAN, finish_s=chunks[-1] if ok else NAN,
                         input_length=10, output_length=n_out, n_out=n_out if ok else 0, chunk_times_s=chunks)


def run(n: int = 100, gap_s: float = 0.1, **kwargs) -> list[RequestRecord]:
    return [rec(i, gap_s * i, **kwargs) for i in range(n)]


def assess(records: list[RequestRecord], cfg: ValidityConfig, **kwargs) -> dict:
    return assess_validity(records, summarize(records, SLOConfig()), cfg, **kwargs)


# --- duration: first to last scheduled arrival -----------------------------------------------------------


def test_duration_ends_at_the_last_scheduled_arrival_not_the_last_finish() -> None:
    records = run(11, gap_s=1.0)  # scheduled over 10 s
    records.append(rec(11, 10.0, ttft_s=50.0))  # finishes 50 s later: the run lasted 60 s
    v = assess(records, ValidityConfig(min_duration_s=10.0))
    assert v["duration_s"] == pytest.approx(10.0) and v["valid"] is True
    assert v["run_duration_s"] == pytest.approx(60.04)
    v = assess(records, ValidityConfig(min_duration_s=10.5))  # the long tail does not count
    assert v["valid"] is False
    assert v["reasons"] == ["requests were scheduled over 10.000 s, shorter than the minimum 10.5 s"]


# --- unfinished requests ---------------------------------------------------------------------------------


def test_unfinished_requests_make_the_run_invalid() -> None:
    records = run(99)
    assert assess(records, ValidityConfig())["valid"] is True
    records.append(rec(99, 9.9, status=RequestStatus.UNFINISHED))
    v = assess(records, ValidityConfig())
    assert v["n_unfinished"] == 1 and v["unfinished_rate"] == pytest.approx(0.01)
    assert v["valid"] is False
    assert v["reasons"] == ["1 of 100 requests unfinished (1.00%), more than the maximum 0.00%"]
    assert assess(records, ValidityConfig(max_unfinished_rate=0.01))["valid"] is True


# --- achieved against offered rate -----------------------------------------------------------------------


def test_achieved_rate_close_to_offered_passes() -> None:
    records = run(101, gap_s=0.1)  # 10 req/s, sent on schedule
    v = assess(records, ValidityConfig(), offered_rate_rps=10.0)
    assert v["achieved_issue_rate_rps"] == pytest.approx(10.0)
    assert v["rate_shortfall"] == pytest.approx(0.0, abs=1e-9) and v["valid"] is True


def test_client_falling_behind_its_rate_is_invalid() -> None:
    # Scheduled at 10 req/s, but every send drifts later: sends are 0.12 s apart (8.33 req/s achieved).
    records = [rec(i, 0.1 * i, lag_s=0.02 * i) for i in range(101)]
    cfg = ValidityConfig(max_p99_issue_lag_ms=1e9)  # isolate the rate check
    v = assess(records, cfg, offered_rate_rps=10.0)
    assert v["rate_shortfall"] == pytest.approx(1 - 1 / 1.2)
    assert v["valid"] is False
    assert v["reasons"] == ["achieved issue rate 8.333 req/s is 16.7% below the offered 10.000 req/s "
                            "(maximum shortfall 5%)"]
    # the offered rate defaults to the records' own schedule
    assert assess(records, cfg)["offered_rate_rps"] == pytest.approx(10.0)
    assert assess(records, ValidityConfig(max_p99_issue_lag_ms=1e9, max_rate_shortfall=0.2),
                  offered_rate_rps=10.0)["valid"] is True


def test_requests_never_sent_count_as_shortfall() -> None:
    records = run(50)  # half the schedule was never sent: cut off at 4.9 s of a 9.9 s schedule
    records += [RequestRecord(50 + i, RequestStatus.REJECTED, 5.0 + 0.1 * i, NAN, NAN, NAN, 10, 5, 0)
                for i in range(50)]
    v = assess(records, ValidityConfig(), offered_rate_rps=10.0)
    assert v["achieved_issue_rate_rps"] == pytest.approx(10.0)  # what was sent, was on time
    assert v["duration_s"] == pytest.approx(9.9) and v["valid"] is True  # rejections are allowed


def test_closed_loop_skips_the_rate_check() -> None:
    v = assess(run(20, gap_s=0.5), ValidityConfig(), offered_rate_rps=NAN)
    assert v["offered_rate_rps"] is None and v["rate_shortfall"] is None and v["valid"] is True


# --- confidence bounds of quantiles ----------------------------------------------------------------------


def brute_force_ranks(n: int, q: float, confidence: float) -> tuple[int | None, int | None]:
    """The same ranks from exact binomial sums (math.comb), searching every rank."""
    pmf = [math.comb(n, j) * q**j * (1 - q) ** (n - j) for j in range(n + 1)]
    cdf = [sum(pmf[: k + 1]) for k in range(n + 1)]  # cdf[k] = P(B <= k), B ~ Binomial(n, q)
    half = (1 - confidence) / 2
    lower = [r for r in range(1, n + 1) if cdf[r - 1] <= half]
    upper = [r for r in range(1, n + 1) if cdf[r - 1] >= 1 - half]
    return (max(lower) if lower else None, min(upper) if upper else None)


@pytest.mark.parametrize("n", [1, 10, 29, 30, 40, 100, 367, 368, 1000])
@pytest.mark.parametrize("q", [0.9, 0.99])
def test_ci_ranks_match_a_brute_force_binomial_calculation(n: int, q: float) -> None:
    assert quantile_ci_ranks(n, q, 0.95) == brute_force_ranks(n, q, 0.95)


def test_ci_ranks_cover_with_the_stated_confidence() -> None:
    n, q = 500, 0.99
    lo, up = quantile_ci_ranks(n, q, 0.95)
    coverage = sum(math.comb(n, j) * q**j * (1 - q) ** (n - j) for j in range(lo, up))  # P(l <= B <= u - 1)
    assert coverage >= 0.95


def test_min_samples_to_bound_p99_and_p90() -> None:
    assert min_samples_to_bound(0.99, 0.95) == 368  # 1 - 0.99**367 < 0.975 <= 1 - 0.99**368
    assert 1 - 0.99**367 < 0.975 <= 1 - 0.99**368
    assert min_samples_to_bound(0.9, 0.95) == 36
    assert quantile_ci_ranks(367, 0.99, 0.95)[1] is None and quantile_ci_ranks(368, 0.99, 0.95)[1] == 368


def test_quantile_bound_reads_the_order_statistics() -> None:
    values = np.arange(1.0, 1001.0)  # 1..1000: x_(k) = k
    b = quantile_bound(values, 99.0, 0.95)
    lo, up = quantile_ci_ranks(1000, 0.99, 0.95)
    assert (b["lower"], b["upper"]) == (float(lo), float(up))
    assert b["lower"] <= b["estimate"] <= b["upper"]
    assert b["relative_width"] == pytest.approx((up - lo) / b["estimate"])
    assert quantile_bound([NAN, 1.0], 99.0, 0.95)["n"] == 1


def test_too_few_samples_to_bound_p99_is_invalid_naming_the_metric() -> None:
    records = run(100)
    cfg = ValidityConfig(max_ci_relative_width=1.0)
    v = assess(records, cfg)
    assert v["valid"] is False
    assert v["quantile_bounds"]["p99_ttft_ms"]["upper"] is None
    assert "p99_ttft_ms cannot be bounded at 95% confidence from 100 samples (needs at least 368)" in v["reasons"]
    assert any(r.startswith("p99_tpot_ms cannot be bounded") for r in v["reasons"])
    # gating p90 only (the 100 samples bound it, and identical latencies give a zero-width interval)
    v = assess(records, ValidityConfig(max_ci_relative_width=1.0, bounded_quantiles=[90.0]))
    assert v["valid"] is True and v["quantile_bounds"]["p90_ttft_ms"]["relative_width"] == 0.0
    assert v["quantile_bounds"]["p99_ttft_ms"]["upper"] is None  # still reported


def test_wide_bound_is_invalid_and_narrow_one_passes() -> None:
    rng = np.random.default_rng(0)
    heavy = rng.pareto(1.2, size=400) + 0.05  # a heavy tail: p99 pinned down badly by 400 samples
    records = [rec(i, 0.1 * i, ttft_s=float(t)) for i, t in enumerate(heavy)]
    cfg = ValidityConfig(max_ci_relative_width=0.5)
    v = assess(records, cfg)
    b = v["quantile_bounds"]["p99_ttft_ms"]
    assert b["relative_width"] > 0.5
    assert v["valid"] is False and any(r.startswith("p99_ttft_ms 95% confidence interval [") for r in v["reasons"])
    light = [rec(i, 0.1 * i, ttft_s=0.1 + 0.001 * float(x)) for i, x in enumerate(rng.random(400))]
    v = assess(light, cfg)
    assert v["quantile_bounds"]["p99_ttft_ms"]["relative_width"] < 0.05 and v["valid"] is True


def test_bounds_are_reported_but_not_gated_by_default() -> None:
    v = assess(run(10), ValidityConfig())
    assert v["valid"] is True and v["max_ci_relative_width"] is None
    assert set(v["quantile_bounds"]) == {"p90_ttft_ms", "p99_ttft_ms", "p90_tpot_ms", "p99_tpot_ms"}
    assert v["quantile_bounds"]["p90_ttft_ms"]["estimate"] == pytest.approx(100.0)
    json.dumps(v, allow_nan=False)


def test_no_tpot_samples_is_not_flagged() -> None:
    records = run(400, n_out=1)  # one-token outputs have no TPOT: nothing is reported, nothing to bound
    v = assess(records, ValidityConfig(max_ci_relative_width=1.0))
    assert v["quantile_bounds"]["p99_tpot_ms"]["n"] == 0 and v["valid"] is True


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"max_unfinished_rate": 1.5}, "max_unfinished_rate"),
        ({"max_rate_shortfall": -0.1}, "max_rate_shortfall"),
        ({"ci_confidence": 1.0}, "ci_confidence"),
        ({"bounded_quantiles": [100.0]}, "bounded_quantiles"),
        ({"max_ci_relative_width": 0.0}, "max_ci_relative_width"),
    ],
)
def test_new_keys_are_validated(kwargs: dict, key: str) -> None:
    with pytest.raises(ValueError, match=rf"^validity\.{key}: must be"):
        ValidityConfig(**kwargs)


# --- combining blocks ------------------------------------------------------------------------------------


def test_combined_block_is_invalid_when_any_part_is_and_names_it() -> None:
    good = assess(run(20), ValidityConfig())
    late = assess(run(20, lag_s=0.05), ValidityConfig())
    combined = combine_validity({"a": good, "b": late})
    assert combined["valid"] is False
    assert combined["reasons"] == [f"b: {r}" for r in late["reasons"]] and combined["reasons"]
    assert combined["variants"]["a"]["valid"] is True
    assert combine_validity({"a": good})["valid"] is True
    swept = {"valid": False, "points": [good, late]}
    assert block_reasons(swept) == [f"point 1: {r}" for r in late["reasons"]]
