"""Run validity: whether a run's numbers may be reported at all (in the spirit of MLPerf's INVALID results).

A run is invalid when it was too short, issued too few requests, failed too often, or when the load
generator fell behind its own schedule (a large issue lag means the offered load was not the one asked
for). The checks and their thresholds are defined in ``docs/metrics.md``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from harness.metrics import percentile, run_duration_s
from harness.records import RequestRecord, RequestStatus

log = logging.getLogger(__name__)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class ValidityConfig:
    """Thresholds a run must meet to be reported as valid."""

    min_duration_s: float = 0.0  # earliest scheduled arrival to latest finish
    min_requests: int = 1  # issued requests
    max_error_rate: float = 0.01  # failed / issued (rejections are not errors)
    max_p99_issue_lag_ms: float = 10.0  # p99 of (sent - scheduled) over every sent request

    def __post_init__(self) -> None:
        checks = (
            ("min_duration_s", lambda v: _is_number(v) and math.isfinite(v) and v >= 0, "a finite number >= 0"),
            ("min_requests", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an integer >= 0"),
            ("max_error_rate", lambda v: _is_number(v) and 0 <= v <= 1, "in [0, 1]"),
            ("max_p99_issue_lag_ms", lambda v: _is_number(v) and v >= 0, "a number >= 0"),
        )
        for key, is_valid, expected in checks:
            value = getattr(self, key)
            if not is_valid(value):
                raise ValueError(f"validity.{key}: must be {expected}, got {value!r}")


def assess_validity(
    records: Iterable[RequestRecord],
    metrics: Mapping[str, Any],
    cfg: ValidityConfig,
    extra_reasons: Sequence[str] = (),
) -> dict[str, Any]:
    """JSON-able validity block: ``valid``, ``reasons`` and each check's measured value and threshold.

    ``metrics`` is the run's ``summarize()`` output; ``duration_s``, ``n_issued`` and ``error_rate``
    are taken from it when present and computed from ``records`` otherwise. The issue-lag check always
    uses every record with a send time, whatever its status. ``extra_reasons`` (for instance
    "outstanding-request cap hit") are appended to the reasons and make the run invalid.
    """
    recs = list(records)
    n_failed = sum(1 for r in recs if str(r.status) == RequestStatus.FAILED.value)
    # Prefer the summary's numbers, so that summary.json and its validity block agree.
    n_issued = int(metrics.get("n_issued", len(recs)))
    error_rate: Optional[float] = metrics.get("error_rate", n_failed / len(recs) if recs else None)
    duration_s: Optional[float] = metrics["duration_s"] if "duration_s" in metrics else run_duration_s(recs)
    lags_ms = np.array([(r.sent_s - r.arrival_s) * 1000.0 for r in recs], dtype=float)
    p99_lag_ms = percentile(lags_ms, 99.0)  # NaN (never sent) dropped; None when nothing was sent

    reasons: list[str] = []
    if duration_s is None:
        if cfg.min_duration_s > 0:
            reasons.append(f"run duration unknown (no timestamps); the minimum is {cfg.min_duration_s:g} s")
    elif duration_s < cfg.min_duration_s:
        reasons.append(f"run lasted {duration_s:.3f} s, shorter than the minimum {cfg.min_duration_s:g} s")
    if n_issued < cfg.min_requests:
        reasons.append(f"{n_issued} requests issued, fewer than the minimum {cfg.min_requests}")
    if error_rate is not None and error_rate > cfg.max_error_rate:
        reasons.append(
            f"error rate {error_rate:.2%} ({n_failed} of {n_issued} requests failed) "
            f"exceeds the maximum {cfg.max_error_rate:.2%}"
        )
    if p99_lag_ms is not None and p99_lag_ms > cfg.max_p99_issue_lag_ms:
        reasons.append(
            f"p99 issue lag {p99_lag_ms:.3f} ms exceeds {cfg.max_p99_issue_lag_ms:g} ms: "
            "the load generator fell behind its arrival schedule"
        )
    reasons.extend(str(reason) for reason in extra_reasons)
    if reasons:
        log.warning("run is invalid: %s", "; ".join(reasons))

    return {
        "valid": not reasons,
        "reasons": reasons,
        "duration_s": duration_s,
        "min_duration_s": float(cfg.min_duration_s),
        "n_issued": n_issued,
        "min_requests": int(cfg.min_requests),
        "n_failed": n_failed,
        "error_rate": error_rate,
        "max_error_rate": float(cfg.max_error_rate),
        "p99_issue_lag_ms": p99_lag_ms,
        "max_p99_issue_lag_ms": float(cfg.max_p99_issue_lag_ms),
    }
