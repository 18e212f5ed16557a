"""Validity checks: each one triggers with its reason, and a clean run passes."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from harness.metrics import summarize
from harness.slo import SLOConfig
from harness.validity import ValidityConfig, assess_validity
from vocab.records import RequestRecord, RequestStatus

NAN = float("nan")


def rec(rid: int, status: RequestStatus = RequestStatus.OK, arrival: float = 0.0, lag_ms: float = 0.0,
        finish: float | None = None) -> RequestRecord:
    sent = arrival + lag_ms / 1000.0
    ok = status == RequestStatus.OK
    end = (arrival + 0.5) if finish is None else finish
    return RequestRecord(
        request_id=rid, status=status, arrival_s=arrival, sent_s=sent,
        first_token_s=arrival + 0.1 if ok else NAN, finish_s=end,
        input_length=10, output_length=2, n_out=2 if ok else 0,
        chunk_times_s=(arrival + 0.1, end) if ok else (),
    )


def clean_run(n: int = 100) -> list[RequestRecord]:
    """n ok requests, one every 0.1 s, issued 1 ms late: lasts 0.1 * (n - 1) + 0.5 s."""
    return [rec(i, arrival=0.1 * i, lag_ms=1.0) for i in range(n)]


def assess(records: list[RequestRecord], cfg: ValidityConfig, extra: tuple[str, ...] = ()) -> dict:
    return assess_validity(records, summarize(records, SLOConfig()), cfg, extra)


def test_clean_run_is_valid() -> None:
    v = assess(clean_run(), ValidityConfig(min_duration_s=9.9, min_requests=100))
    assert v["valid"] is True and v["reasons"] == []
    assert v["duration_s"] == pytest.approx(9.9)  # first to last scheduled arrival
    assert v["run_duration_s"] == pytest.approx(10.4)  # the summary's, to the last finish
    assert v["n_issued"] == 100 and v["error_rate"] == 0.0
    assert v["p99_issue_lag_ms"] == pytest.approx(1.0)
    assert (v["min_duration_s"], v["min_requests"], v["max_error_rate"], v["max_p99_issue_lag_ms"]) == (
        9.9, 100, 0.01, 10.0)
    assert json.loads(json.dumps(v, allow_nan=False)) == v


def test_too_short() -> None:
    v = assess(clean_run(), ValidityConfig(min_duration_s=60.0))
    assert v["valid"] is False
    assert len(v["reasons"]) == 1 and "shorter than the minimum 60 s" in v["reasons"][0]


def test_too_few_requests() -> None:
    v = assess(clean_run(5), ValidityConfig(min_requests=10))
    assert v["valid"] is False
    assert v["reasons"] == ["5 requests issued, fewer than the minimum 10"]


def test_error_rate_counts_failed_not_rejected() -> None:
    records = clean_run(98) + [rec(98, RequestStatus.REJECTED, arrival=1.0), rec(99, RequestStatus.FAILED, arrival=1.0)]
    v = assess(records, ValidityConfig(max_error_rate=0.01))
    assert v["error_rate"] == pytest.approx(0.01) and v["n_failed"] == 1
    assert v["valid"] is True  # 1% is not above the 1% limit; the rejection is no error

    records.append(rec(100, RequestStatus.FAILED, arrival=1.0))
    v = assess(records, ValidityConfig(max_error_rate=0.01))
    assert v["valid"] is False
    assert len(v["reasons"]) == 1 and v["reasons"][0].startswith("error rate 1.98% (2 of 101 requests failed)")


def test_issue_lag_over_every_sent_request() -> None:
    # The lagging requests failed: their lag still shows that the client fell behind.
    records = clean_run(90) + [rec(100 + i, RequestStatus.FAILED, arrival=1.0, lag_ms=50.0) for i in range(10)]
    v = assess(records, ValidityConfig(max_error_rate=1.0, max_p99_issue_lag_ms=10.0))
    assert v["p99_issue_lag_ms"] == pytest.approx(50.0)
    assert v["valid"] is False
    assert len(v["reasons"]) == 1 and v["reasons"][0].startswith("p99 issue lag 50.000 ms exceeds 10 ms")


def test_unsent_requests_are_ignored_by_issue_lag() -> None:
    records = clean_run(10)
    never_sent = RequestRecord(99, RequestStatus.REJECTED, 0.0, NAN, NAN, NAN, 10, 2, 0)
    v = assess([*records, never_sent], ValidityConfig(max_rate_shortfall=1.0))  # 10 of 11 sent: a 10% shortfall
    assert v["p99_issue_lag_ms"] == pytest.approx(1.0) and v["valid"] is True


def test_extra_reasons_make_the_run_invalid() -> None:
    v = assess(clean_run(), ValidityConfig(), ("outstanding-request cap hit",))
    assert v["valid"] is False and v["reasons"] == ["outstanding-request cap hit"]


def test_several_reasons_are_all_reported() -> None:
    records = [rec(0, RequestStatus.FAILED, lag_ms=20.0)]
    v = assess(records, ValidityConfig(min_duration_s=5.0, min_requests=2), ("cap hit",))
    assert len(v["reasons"]) == 5 and v["reasons"][-1] == "cap hit"


def test_empty_run() -> None:
    v = assess_validity([], summarize([], SLOConfig()), ValidityConfig(min_duration_s=1.0))
    assert v["valid"] is False
    assert v["n_issued"] == 0 and v["duration_s"] is None and v["p99_issue_lag_ms"] is None
    assert any("duration unknown" in r for r in v["reasons"])
    assert any("0 requests issued" in r for r in v["reasons"])
    json.dumps(v, allow_nan=False)


def test_counts_come_from_metrics_but_duration_from_the_schedule() -> None:
    v = assess_validity(clean_run(10), {"duration_s": 100.0, "n_issued": 12, "error_rate": 0.0},
                        ValidityConfig(min_duration_s=50.0, min_requests=11))
    assert v["n_issued"] == 12 and v["run_duration_s"] == 100.0
    # a long tail of finishes does not make a short schedule long enough
    assert v["duration_s"] == pytest.approx(0.9) and v["valid"] is False
    v = assess_validity(clean_run(10), {}, ValidityConfig(min_duration_s=0.5))
    assert v["duration_s"] == pytest.approx(0.9) and v["n_issued"] == 10 and v["valid"] is True


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"min_duration_s": -1.0}, "min_duration_s"),
        ({"min_requests": -1}, "min_requests"),
        ({"max_error_rate": 1.5}, "max_error_rate"),
        ({"max_p99_issue_lag_ms": -0.1}, "max_p99_issue_lag_ms"),
    ],
)
def test_config_validation_names_key(kwargs: dict, key: str) -> None:
    with pytest.raises(ValueError, match=rf"^validity\.{key}: must be"):
        ValidityConfig(**kwargs)


def test_config_is_a_structured_schema() -> None:
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ValidityConfig), {"min_requests": 50}))
    assert isinstance(cfg, ValidityConfig) and cfg.min_requests == 50 and cfg.max_error_rate == 0.01
