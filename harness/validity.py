"""Run validity: whether a run's numbers may be reported at all (in the spirit of MLPerf LoadGen's INVALID results).

A run is invalid when it was too short (first to last *scheduled* arrival), issued too few requests, failed too
often, left requests unfinished, when the load generator fell behind its own schedule (a large issue lag, or an
achieved issue rate short of the offered one: then the offered load was not the one asked for), or when its tail
latencies are not pinned down by its samples (a distribution-free confidence interval of p90/p99 TTFT and TPOT
too wide, or too few samples to bound the quantile at all). A point measured on real processes is also invalid
when other work on the host took CPU during it (processes outside the job, or a hypervisor's steal time; measured
by :mod:`harness.host_load`), or when its open-loop load exceeded what the system served, so that its queues grew
through the whole run (``overload_check``). The checks and their thresholds are defined in ``docs/metrics.md``;
the per-experiment thresholds are the ``validity:`` blocks of ``conf/experiment/*.yaml``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from harness.metrics import RecordColumns, extract_columns, percentile
from vocab.records import RequestRecord, RequestStatus, block_reasons

log = logging.getLogger(__name__)

# per-request latency columns whose tail quantiles are bounded (``request_frame`` names)
BOUNDED_METRICS = ("ttft_ms", "tpot_ms")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_fraction(value: object) -> bool:
    return _is_number(value) and 0 <= value <= 1


@dataclass
class ValidityConfig:
    """Thresholds a run must meet to be reported as valid.

    The defaults are permissive (every composed config passes them unless something is clearly wrong);
    each experiment sets its real minimums in its ``validity:`` block (see ``docs/metrics.md``).
    """

    min_duration_s: float = 0.0  # first to last scheduled arrival of the issued requests
    min_requests: int = 1  # issued requests
    max_error_rate: float = 0.01  # failed / issued (rejections are not errors)
    max_p99_issue_lag_ms: float = 10.0  # p99 of (sent - scheduled) over every sent request
    max_unfinished_rate: float = 0.0  # unfinished (cut off, never sent) / issued
    max_rate_shortfall: float = 0.05  # 1 - achieved issue rate / offered rate (open-loop schedules)
    ci_confidence: float = 0.95  # two-sided confidence of the order-statistic interval of each quantile
    bounded_quantiles: list[float] = field(default_factory=lambda: [90.0, 99.0])  # gated quantiles (percent)
    max_ci_relative_width: Optional[float] = None  # (upper - lower) / estimate; None: reported, not checked
    max_outside_cpu_share: float = 0.10  # cores used by processes outside the job during a real point
    max_steal_share: float = 0.05  # steal ticks / all ticks of the host during a real point
    min_host_load_wall_s: float = 1.0  # shorter points are not judged (the kernel counts CPU in 10 ms ticks)
    overload_ttft_growth: float = 3.0  # last third's median TTFT / first third's, beyond which queues grew
    overload_min_ttft_ms: float = 500.0  # ... and only when the last third's median TTFT exceeds this

    def __post_init__(self) -> None:
        checks = (
            ("min_duration_s", lambda v: _is_number(v) and math.isfinite(v) and v >= 0, "a finite number >= 0"),
            ("min_requests", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an integer >= 0"),
            ("max_error_rate", _is_fraction, "in [0, 1]"),
            ("max_p99_issue_lag_ms", lambda v: _is_number(v) and v >= 0, "a number >= 0"),
            ("max_unfinished_rate", _is_fraction, "in [0, 1]"),
            ("max_rate_shortfall", _is_fraction, "in [0, 1]"),
            ("ci_confidence", lambda v: _is_number(v) and 0 < v < 1, "in (0, 1)"),
            ("bounded_quantiles", lambda v: all(_is_number(q) and 0 < q < 100 for q in v),
             "a list of percentiles, each in (0, 100)"),
            ("max_ci_relative_width", lambda v: v is None or (_is_number(v) and v > 0), "null or a number > 0"),
            ("max_outside_cpu_share", lambda v: _is_number(v) and math.isfinite(v) and v >= 0,
             "a finite number of cores >= 0"),
            ("max_steal_share", _is_fraction, "in [0, 1]"),
            ("min_host_load_wall_s", lambda v: _is_number(v) and math.isfinite(v) and v >= 0, "a finite number >= 0"),
            ("overload_ttft_growth", lambda v: _is_number(v) and math.isfinite(v) and v >= 1, "a finite number >= 1"),
            ("overload_min_ttft_ms", lambda v: _is_number(v) and math.isfinite(v) and v >= 0, "a finite number >= 0"),
        )
        for key, is_valid, expected in checks:
            value = getattr(self, key)
            if not is_valid(value):
                raise ValueError(f"validity.{key}: must be {expected}, got {value!r}")


# --- distribution-free confidence interval of a quantile -------------------------------------------------


def _binomial_cdf(n: int, p: float) -> np.ndarray:
    """``cdf[k] = P(B <= k)`` for ``B ~ Binomial(n, p)``, k = 0..n (log-space pmf, so large n is fine)."""
    k = np.arange(n + 1, dtype=float)
    log_factorial = np.array(list(map(math.lgamma, range(1, n + 2))))  # log(k!) = lgamma(k + 1), k = 0..n
    log_pmf = (math.lgamma(n + 1) - log_factorial - log_factorial[::-1] + k * math.log(p)
               + (n - k) * math.log1p(-p))
    return np.minimum(np.cumsum(np.exp(log_pmf)), 1.0)


def quantile_ci_ranks(n: int, q: float, confidence: float) -> tuple[Optional[int], Optional[int]]:
    """1-based ranks (l, u) of the order statistics that bound the ``q``-quantile (``q`` in (0, 1)) of a
    continuous distribution from ``n`` samples with probability >= ``confidence``.

    The number B of samples below the quantile is Binomial(n, q); x_(l) <= quantile <= x_(u) holds when
    l <= B <= u - 1. Each tail gets at most (1 - confidence) / 2: l is the largest rank with
    P(B <= l - 1) <= alpha/2 and u the smallest with P(B <= u - 1) >= 1 - alpha/2. A side that no rank in
    1..n achieves is None (too few samples: the upper bound of p99 needs n >= log(alpha/2) / log(0.99)).
    This is the order-statistic argument behind MLPerf LoadGen's early-stopping estimate.
    """
    if n <= 0:
        return None, None
    half = (1.0 - confidence) / 2.0
    cdf = _binomial_cdf(n, q)  # cdf[k] = P(B <= k)
    below = np.flatnonzero(cdf[:n] <= half)  # candidates l - 1 in 0..n-1
    above = np.flatnonzero(cdf[:n] >= 1.0 - half)  # candidates u - 1 in 0..n-1
    lower = int(below[-1]) + 1 if below.size else None
    upper = int(above[0]) + 1 if above.size else None
    return lower, upper


def min_samples_to_bound(q: float, confidence: float) -> int:
    """Fewest samples for which the upper bound of the ``q``-quantile exists: 1 - q**n >= 1 - alpha/2."""
    return int(math.ceil(math.log((1.0 - confidence) / 2.0) / math.log(q) - 1e-12))


def quantile_bound(values: Iterable[float] | np.ndarray, percent: float, confidence: float,
                   estimate: Optional[float] = None) -> dict[str, Any]:
    """JSON-able bound of the ``percent``-th percentile of ``values`` (NaN dropped): the estimate, the
    interval [lower, upper] with its ranks, its width relative to the estimate and the sample count."""
    x = np.sort(np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=float))
    x = x[np.isfinite(x)]
    n = int(x.size)
    q = percent / 100.0
    if estimate is None:
        estimate = percentile(x, percent)
    lo_rank, up_rank = quantile_ci_ranks(n, q, confidence)
    lower = float(x[lo_rank - 1]) if lo_rank is not None else None
    upper = float(x[up_rank - 1]) if up_rank is not None else None
    rel: Optional[float] = None
    if lower is not None and upper is not None and estimate is not None:
        width = upper - lower
        rel = width / abs(estimate) if estimate else (0.0 if width == 0 else math.inf)
    return {"estimate": estimate, "lower": lower, "upper": upper, "lower_rank": lo_rank, "upper_rank": up_rank,
            "n": n, "min_samples": min_samples_to_bound(q, confidence), "relative_width": rel}


def _key(percent: float, metric: str) -> str:
    return f"p{percent:g}_{metric}"


def quantile_bounds(records: Sequence[RequestRecord] | RecordColumns, quantiles: Sequence[float], confidence: float,
                    metrics: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Bounds of every ``quantiles`` percentile of TTFT and TPOT over the ``ok`` requests (the samples the
    summary's percentiles use); the estimate is the summary's own value where it has one. ``records`` may be
    given as their :class:`~harness.metrics.RecordColumns`."""
    metrics = metrics or {}
    columns = extract_columns(records).columns
    ok = columns["status"] == RequestStatus.OK.value
    out: dict[str, dict[str, Any]] = {}
    for metric in BOUNDED_METRICS:
        values = np.asarray(columns[metric][ok], dtype=float)
        for percent in quantiles:
            key = _key(percent, metric)
            estimate = metrics.get(key)
            out[key] = quantile_bound(values, percent, confidence, estimate if _is_number(estimate) else None)
    return out


# --- the run's schedule ----------------------------------------------------------------------------------


def _arrivals(records: Iterable[RequestRecord]) -> np.ndarray:
    return np.array([r.arrival_s for r in records], dtype=float)


def _scheduled_duration_s(arrivals: np.ndarray) -> Optional[float]:
    arrivals = arrivals[np.isfinite(arrivals)]
    return float(arrivals.max() - arrivals.min()) if arrivals.size else None


def scheduled_duration_s(records: Iterable[RequestRecord]) -> Optional[float]:
    """First to last scheduled arrival of the records (seconds); None without any scheduled arrival."""
    return _scheduled_duration_s(_arrivals(records))


def achieved_issue_rate_rps(records: Iterable[RequestRecord]) -> Optional[float]:
    """(sent requests - 1) / (last send - first send), as ``summarize()``; None with fewer than two sends."""
    sent = np.sort(np.array([r.sent_s for r in records], dtype=float))
    sent = sent[np.isfinite(sent)]
    span = float(sent[-1] - sent[0]) if sent.size >= 2 else 0.0
    return (sent.size - 1) / span if span > 0 else None


def _scheduled_rate_rps(arrivals: np.ndarray) -> Optional[float]:
    arrivals = arrivals[np.isfinite(arrivals)]
    span = float(arrivals.max() - arrivals.min()) if arrivals.size >= 2 else 0.0
    return (arrivals.size - 1) / span if span > 0 else None


# --- host interference and overload (real-process points) ------------------------------------------------


def _finite(value: object) -> bool:
    return _is_number(value) and math.isfinite(value)


def host_interference_reasons(block: Mapping[str, Any], cfg: ValidityConfig) -> list[str]:
    """Reasons a point's host-load block (:class:`harness.host_load.HostLoadMonitor`) makes it invalid:
    processes outside the job used more than ``max_outside_cpu_share`` cores, or the host's steal time
    exceeded ``max_steal_share`` of its CPU time. A point shorter than ``min_host_load_wall_s`` is not judged
    (CPU time is counted in clock ticks), nor is a share that could not be measured (NaN)."""
    wall = block.get("wall_s")
    if not _finite(wall) or wall < cfg.min_host_load_wall_s or wall <= 0:
        return []
    reasons = []
    share = block.get("outside_cpu_share")
    if _finite(share) and share > cfg.max_outside_cpu_share:
        top = ", ".join(f"{comm} {float(cpu_s) / wall:.2f}" for comm, _pid, cpu_s in block.get("top_outside") or [])
        reasons.append(f"host interference: processes outside the job used {share:.2f} cores (threshold "
                       f"{cfg.max_outside_cpu_share:.2f})" + (f": {top}" if top else ""))
    steal = block.get("steal_share")
    if _finite(steal) and steal > cfg.max_steal_share:
        reasons.append(f"host interference: steal {steal:.0%} (threshold {cfg.max_steal_share:.0%})")
    return reasons


def _median_ttft_ms(records: Sequence[RequestRecord]) -> Optional[float]:
    ttft = np.array([(r.first_token_s - r.arrival_s) * 1000.0 for r in records], dtype=float)
    ttft = ttft[np.isfinite(ttft)]
    return float(np.median(ttft)) if ttft.size else None


def _completed_rate_rps(records: Sequence[RequestRecord]) -> Optional[float]:
    """(ok requests - 1) / (last finish - first finish) of the ok requests: the rate the system completed
    requests at, the counterpart of the achieved issue rate; 0 when fewer than two completed out of two or
    more sent, None when fewer than two were sent."""
    if sum(1 for r in records if math.isfinite(r.sent_s)) < 2:
        return None
    finish = np.sort(np.array([r.finish_s for r in records if str(r.status) == RequestStatus.OK.value],
                              dtype=float))
    finish = finish[np.isfinite(finish)]
    span = float(finish[-1] - finish[0]) if finish.size >= 2 else 0.0
    return (finish.size - 1) / span if span > 0 else 0.0


def _duration_text(ms: float) -> str:
    return f"{ms:.0f} ms" if ms < 1000.0 else f"{ms / 1000.0:.1f} s"


def _rate_text(rps: float) -> str:
    return f"{rps:.1f}" if rps >= 1.0 else f"{rps:.2g}"


def overload_check(records: Iterable[RequestRecord], offered_rate_rps: Optional[float],
                   saturation_rps: Optional[float] = None, cfg: Optional[ValidityConfig] = None) -> dict[str, Any]:
    """Whether an open-loop point's queues grew through the whole run (its offered load exceeded what the
    system served): the median TTFT of the last third of the requests (by scheduled arrival) is more than
    ``overload_ttft_growth`` times the first third's and above ``overload_min_ttft_ms``, or the rate the
    requests completed at (``completed_rate_rps``: ok requests - 1 over first to last ok finish) falls more
    than ``max_rate_shortfall`` short of ``offered_rate_rps``. ``saturation_rps`` (a measured saturation rate, when
    known) is only reported. A closed loop (no finite offered rate) is not checked (``checked`` false).
    JSON-able; ``reason`` is the invalidity reason when overloaded, else None."""
    cfg = cfg or ValidityConfig()
    recs = sorted((r for r in records if math.isfinite(r.arrival_s)), key=lambda r: r.arrival_s)
    offered = offered_rate_rps if _finite(offered_rate_rps) and offered_rate_rps > 0 else None
    saturation = float(saturation_rps) if _finite(saturation_rps) and saturation_rps > 0 else None
    third = len(recs) // 3
    first_ms = _median_ttft_ms(recs[:third]) if third else None
    last_ms = _median_ttft_ms(recs[len(recs) - third:]) if third else None
    completed = _completed_rate_rps(recs) if offered is not None else None
    ttft_grew = (offered is not None and first_ms is not None and last_ms is not None
                 and last_ms > cfg.overload_ttft_growth * first_ms and last_ms > cfg.overload_min_ttft_ms)
    rate_short = offered is not None and completed is not None and completed < (1.0 - cfg.max_rate_shortfall) * offered
    overloaded = bool(ttft_grew or rate_short)
    reason = None
    if overloaded:
        parts = [f"offered {_rate_text(offered)} req/s"
                 + (f" against a measured saturation rate of {_rate_text(saturation)} req/s" if saturation else "")]
        if first_ms is not None and last_ms is not None:
            verb = "grew" if last_ms > first_ms else "went"
            parts.append(f"TTFT {verb} from {_duration_text(first_ms)} to {_duration_text(last_ms)} through the run")
        if rate_short:
            parts.append(f"requests completed at {_rate_text(completed)} req/s, "
                         f"{1.0 - completed / offered:.0%} short of the offered rate")
        parts.append("read as a saturation point, not a latency result")
        reason = "overloaded: " + "; ".join(parts)
    return {"overloaded": overloaded, "checked": offered is not None, "reason": reason,
            "first_third_ttft_ms": first_ms, "last_third_ttft_ms": last_ms, "completed_rate_rps": completed,
            "offered_rate_rps": offered, "saturation_rps": saturation,
            "overload_ttft_growth": float(cfg.overload_ttft_growth),
            "overload_min_ttft_ms": float(cfg.overload_min_ttft_ms), "max_rate_shortfall": float(cfg.max_rate_shortfall)}


# --- the assessment --------------------------------------------------------------------------------------


def _bound_reasons(bounds: Mapping[str, Mapping[str, Any]], cfg: ValidityConfig) -> list[str]:
    if cfg.max_ci_relative_width is None:
        return []
    reasons = []
    conf = f"{cfg.ci_confidence:.0%}"
    for metric in BOUNDED_METRICS:
        for percent in cfg.bounded_quantiles:
            key = _key(percent, metric)
            b = bounds[key]
            if b["n"] == 0:  # nothing reported, nothing to bound (e.g. no TPOT when every output is 1 token)
                continue
            if b["relative_width"] is None:
                reasons.append(f"{key} cannot be bounded at {conf} confidence from {b['n']} samples "
                               f"(needs at least {b['min_samples']})")
            elif b["relative_width"] > cfg.max_ci_relative_width:
                reasons.append(f"{key} {conf} confidence interval [{b['lower']:.3f}, {b['upper']:.3f}] is "
                               f"{b['relative_width']:.0%} of the estimate {b['estimate']:.3f}, wider than the "
                               f"maximum {cfg.max_ci_relative_width:.0%}")
    return reasons


def assess_validity(
    records: Iterable[RequestRecord],
    metrics: Mapping[str, Any],
    cfg: ValidityConfig,
    extra_reasons: Sequence[str] = (),
    *,
    offered_rate_rps: Optional[float] = None,
    host_load: Optional[Mapping[str, Any]] = None,
    saturation_rps: Optional[float] = None,
    check_overload: Optional[bool] = None,
    columns: Optional[RecordColumns] = None,
) -> dict[str, Any]:
    """JSON-able validity block: ``valid``, ``reasons`` and each check's measured value and threshold.

    ``metrics`` is the run's ``summarize()`` output; ``n_issued``, ``error_rate`` and
    ``achieved_issue_rate_rps`` are taken from it when present and computed from ``records`` otherwise.
    ``duration_s`` is the first to last *scheduled* arrival of the records (the summary's ``duration_s``,
    to the last finish, is kept as ``run_duration_s``). The issue-lag check uses every record with a send
    time, whatever its status. ``offered_rate_rps`` is the workload schedule's rate (computed from the
    records' scheduled arrivals when not given; NaN for a closed loop, which skips the rate check).
    ``extra_reasons`` (for instance "outstanding-request cap hit") are appended and make the run invalid.

    For a point measured on real processes: ``host_load`` (a :class:`harness.host_load.HostLoadMonitor`
    block) is kept under ``host_load`` with its thresholds, and :func:`host_interference_reasons` are added;
    the overload check (:func:`overload_check`, under ``overload``; open-loop schedules only) runs when
    ``check_overload`` is true, or, when it is None, whenever ``host_load`` or ``saturation_rps`` is given.
    Without these arguments the block is exactly what it was before they existed. ``columns``, the records'
    :class:`~harness.metrics.RecordColumns` when the caller has them, saves extracting them again.
    """
    recs = records if isinstance(records, Sequence) else list(records)  # a lazy sequence stays unmade
    status = columns.columns["status"] if columns is not None else np.array([str(r.status) for r in recs], dtype=object)
    n_failed = int(np.count_nonzero(status == RequestStatus.FAILED.value))
    n_unfinished = int(np.count_nonzero(status == RequestStatus.UNFINISHED.value))
    # Prefer the summary's numbers, so that summary.json and its validity block agree.
    n_issued = int(metrics.get("n_issued", len(recs)))
    error_rate: Optional[float] = metrics.get("error_rate", n_failed / len(recs) if recs else None)
    unfinished_rate = n_unfinished / n_issued if n_issued else None
    arrivals = columns.columns["arrival_s"] if columns is not None else _arrivals(recs)
    duration_s = _scheduled_duration_s(arrivals)
    achieved = metrics["achieved_issue_rate_rps"] if "achieved_issue_rate_rps" in metrics \
        else achieved_issue_rate_rps(recs)
    offered = _scheduled_rate_rps(arrivals) if offered_rate_rps is None else offered_rate_rps
    offered = offered if offered is not None and math.isfinite(offered) and offered > 0 else None
    shortfall = None
    if offered is not None:  # nothing (or one request) sent at an open-loop rate: all of it is missing
        shortfall = max(1.0 - (achieved or 0.0) / offered, 0.0)
    lags_ms = columns.columns["issue_lag_ms"] if columns is not None else \
        np.array([(r.sent_s - r.arrival_s) * 1000.0 for r in recs], dtype=float)
    p99_lag_ms = percentile(lags_ms, 99.0)  # NaN (never sent) dropped; None when nothing was sent
    reported = sorted({90.0, 99.0, *map(float, cfg.bounded_quantiles)})
    bounds = quantile_bounds(recs if columns is None else columns, reported, cfg.ci_confidence, metrics)

    reasons: list[str] = []
    if duration_s is None:
        if cfg.min_duration_s > 0:
            reasons.append(f"run duration unknown (no scheduled arrivals); the minimum is {cfg.min_duration_s:g} s")
    elif duration_s < cfg.min_duration_s:
        reasons.append(f"requests were scheduled over {duration_s:.3f} s, shorter than the minimum "
                       f"{cfg.min_duration_s:g} s")
    if n_issued < cfg.min_requests:
        reasons.append(f"{n_issued} requests issued, fewer than the minimum {cfg.min_requests}")
    if error_rate is not None and error_rate > cfg.max_error_rate:
        reasons.append(
            f"error rate {error_rate:.2%} ({n_failed} of {n_issued} requests failed) "
            f"exceeds the maximum {cfg.max_error_rate:.2%}"
        )
    if unfinished_rate is not None and unfinished_rate > cfg.max_unfinished_rate:
        reasons.append(f"{n_unfinished} of {n_issued} requests unfinished ({unfinished_rate:.2%}), more than the "
                       f"maximum {cfg.max_unfinished_rate:.2%}")
    if p99_lag_ms is not None and p99_lag_ms > cfg.max_p99_issue_lag_ms:
        reasons.append(
            f"p99 issue lag {p99_lag_ms:.3f} ms exceeds {cfg.max_p99_issue_lag_ms:g} ms: "
            "the load generator fell behind its arrival schedule"
        )
    if shortfall is not None and shortfall > cfg.max_rate_shortfall:
        reasons.append(f"achieved issue rate {achieved or 0.0:.3f} req/s is {shortfall:.1%} below the offered "
                       f"{offered:.3f} req/s (maximum shortfall {cfg.max_rate_shortfall:.0%})")
    reasons.extend(_bound_reasons(bounds, cfg))
    extra_blocks: dict[str, Any] = {}
    if host_load is not None:
        extra_blocks["host_load"] = {**host_load, "max_outside_cpu_share": float(cfg.max_outside_cpu_share),
                                     "max_steal_share": float(cfg.max_steal_share),
                                     "min_host_load_wall_s": float(cfg.min_host_load_wall_s)}
        first_reasons = host_interference_reasons(host_load, cfg)
    else:
        first_reasons = []
    if check_overload or (check_overload is None and (host_load is not None or saturation_rps is not None)):
        overload = overload_check(recs, offered, saturation_rps, cfg)
        extra_blocks["overload"] = overload
        if overload["reason"]:
            first_reasons.append(overload["reason"])
    # a busy host or an overloaded system explains the other failures (issue lag, wide intervals): first
    reasons[:0] = first_reasons
    reasons.extend(str(reason) for reason in extra_reasons)
    if reasons:
        log.warning("run is invalid: %s", "; ".join(reasons))

    return {
        "valid": not reasons,
        "reasons": reasons,
        "duration_s": duration_s,
        "run_duration_s": metrics.get("duration_s"),
        "min_duration_s": float(cfg.min_duration_s),
        "n_issued": n_issued,
        "min_requests": int(cfg.min_requests),
        "n_failed": n_failed,
        "error_rate": error_rate,
        "max_error_rate": float(cfg.max_error_rate),
        "n_unfinished": n_unfinished,
        "unfinished_rate": unfinished_rate,
        "max_unfinished_rate": float(cfg.max_unfinished_rate),
        "p99_issue_lag_ms": p99_lag_ms,
        "max_p99_issue_lag_ms": float(cfg.max_p99_issue_lag_ms),
        "offered_rate_rps": offered,
        "achieved_issue_rate_rps": achieved,
        "rate_shortfall": shortfall,
        "max_rate_shortfall": float(cfg.max_rate_shortfall),
        "ci_confidence": float(cfg.ci_confidence),
        "bounded_quantiles": [float(q) for q in cfg.bounded_quantiles],
        "max_ci_relative_width": None if cfg.max_ci_relative_width is None else float(cfg.max_ci_relative_width),
        "quantile_bounds": bounds,
        **extra_blocks,
    }


def combine_validity(parts: Mapping[str, Mapping[str, Any]], kind: str = "variants") -> dict[str, Any]:
    """One block over several assessed parts (variants of a comparison, points of a sweep): ``valid`` only
    when every part is, ``reasons`` each prefixed with its part's name, and the parts under ``kind``."""
    reasons = [f"{name}: {reason}" for name, block in parts.items() for reason in block_reasons(block)]
    return {"valid": all(bool(block.get("valid", False)) for block in parts.values()), "reasons": reasons,
            kind: {name: dict(block) for name, block in parts.items()}}
