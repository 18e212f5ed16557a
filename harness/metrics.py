"""Request-level latency metrics, SLO attainment, goodput and throughput of one run.

Every definition here is written down once, with its edge cases and sources, in ``docs/metrics.md``.
Inputs are ``RequestRecord``s (times in seconds from the run's origin); outputs are in milliseconds with
the unit in the name (``p99_ttft_ms``). Summaries are flat, JSON-able dicts: statistics over an empty
set are ``None``, never NaN. All percentiles go through :func:`percentiles` (method stated once).
"""

from __future__ import annotations

import itertools
import logging
import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from harness.slo import BOUND_KEYS, SLOConfig
from vocab.records import RECORD_FIELD_COLUMNS, RecordFieldColumns, RequestRecord, RequestStatus

if TYPE_CHECKING:  # request_frame imports pandas when called; the summary needs none
    import pandas as pd

log = logging.getLogger(__name__)

PERCENTILE_METHOD = (
    "numpy.percentile(method='linear'), i.e. Hyndman & Fan type 7 linear interpolation; NaN values dropped"
)
LATENCY_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "tbt_ms", "issue_lag_ms")
# Percentile statistics reported for every latency metric (the mean is reported too).
PERCENTILE_STATS = (("median", 50.0), ("p90", 90.0), ("p99", 99.0))
# Mooncake TBT averages the slowest tenth of a request's intervals: ceil(k / 10), computed in integers.
TBT_SLOWEST_DIVISOR = 10
# Bounds that a request with a single output token meets vacuously: it has no inter-token interval.
PER_TOKEN_BOUNDS = ("tpot_ms", "tbt_ms")

FRAME_COLUMNS = (
    "request_id",
    "status",
    "arrival_s",
    "sent_s",
    "first_token_s",
    "finish_s",
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "tbt_ms",
    "itl_count",
    "issue_lag_ms",
    "n_out",
    "output_length",
    "input_length",
    "cached_tokens",
    "instance",
    "prefix_group",
    "shared_prefix_len",
    "session_id",
    "turn",
    "error",
)

_OK = RequestStatus.OK.value


# --------------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------------


def _finite_or_none(value: float) -> Optional[float]:
    return float(value) if math.isfinite(value) else None


def _clean(values: Iterable[float] | np.ndarray) -> np.ndarray:
    """1-D float array of ``values`` with NaNs dropped."""
    arr = np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=float).ravel()
    nan = np.isnan(arr)
    return arr[~nan] if nan.any() else arr


def percentiles(values: Iterable[float] | np.ndarray, qs: Sequence[float]) -> list[Optional[float]]:
    """The ``qs``-th percentiles (each 0..100) of ``values``, NaNs dropped; ``None`` each for an empty set.

    The one place the suite computes percentiles: numpy's ``'linear'`` method (Hyndman & Fan type 7,
    numpy's and vLLM's default), stated in every summary as ``percentile_method``.
    """
    qs = [float(q) for q in qs]
    for q in qs:
        if not 0.0 <= q <= 100.0:
            raise ValueError(f"percentile q must be in [0, 100], got {q!r}")
    arr = _clean(values)
    if arr.size == 0 or not qs:
        return [None] * len(qs)
    return [float(v) for v in np.percentile(arr, qs, method="linear")]


def percentile(values: Iterable[float] | np.ndarray, q: float) -> Optional[float]:
    """The ``q``-th percentile (0..100) of ``values``, NaNs dropped; ``None`` for an empty set."""
    return percentiles(values, [q])[0]


def mean(values: Iterable[float] | np.ndarray) -> Optional[float]:
    """Arithmetic mean of ``values``, NaNs dropped; ``None`` for an empty set."""
    arr = _clean(values)
    return float(arr.mean()) if arr.size else None


def describe(values: Iterable[float] | np.ndarray, name: str) -> dict[str, Optional[float]]:
    """``mean_<name>``, ``median_<name>``, ``p90_<name>``, ``p99_<name>`` of ``values`` (NaNs dropped)."""
    arr = _clean(values)  # (mean and percentiles find no NaN left to drop)
    out: dict[str, Optional[float]] = {f"mean_{name}": float(arr.mean()) if arr.size else None}
    values_at = percentiles(arr, [q for _, q in PERCENTILE_STATS])
    for (label, _), value in zip(PERCENTILE_STATS, values_at, strict=True):
        out[f"{label}_{name}"] = value
    return out


# --------------------------------------------------------------------------------------------------
# Per-request metrics
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordColumns:
    """A run's records as columns, extracted once: the per-request values, the pooled token intervals and
    every record's chunk times end to end. :func:`summarize` and :func:`request_frame` take either records or
    this; a job that needs several of them over the same records extracts once (:func:`extract_columns`)."""

    columns: dict[str, np.ndarray]
    extra: dict[str, list[Any]]
    itl_ms: np.ndarray  # every interval of every record, in record order
    itl_count: np.ndarray  # intervals per record (max(chunks - 1, 0))
    chunk_times_s: np.ndarray  # every record's chunk times, record after record
    n_chunks: np.ndarray  # chunk times per record

    def __len__(self) -> int:
        return len(self.columns["request_id"])


def _int_column(records: Sequence[RequestRecord], attr: str) -> np.ndarray:
    return np.fromiter(map(operator.attrgetter(attr), records), dtype=np.int64, count=len(records))


def _float_column(records: Sequence[RequestRecord], attr: str) -> np.ndarray:
    return np.fromiter(map(operator.attrgetter(attr), records), dtype=np.float64, count=len(records))


def _chunk_times(records: Sequence[RequestRecord]) -> tuple[np.ndarray, np.ndarray]:
    """Every record's chunk times, end to end, and the count per record."""
    chunks = list(map(operator.attrgetter("chunk_times_s"), records))
    n_chunks = np.fromiter(map(len, chunks), dtype=np.int64, count=len(records))
    times = np.fromiter(itertools.chain.from_iterable(chunks), dtype=np.float64, count=int(n_chunks.sum()))
    return times, n_chunks


def _intervals(times: np.ndarray, n_chunks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pooled chunk-to-chunk intervals (ms) and the count per record (each large array made once: fresh
    memory is what these steps spend most on)."""
    total = times.size
    itl_count = np.maximum(n_chunks - 1, 0)
    if total < 2:
        return np.empty(0), itl_count
    # diff[j] = times[j+1] - times[j]; drop the differences that straddle two records.
    ends = np.cumsum(n_chunks)
    straddling = ends[(ends > 0) & (ends < total)] - 1
    keep = np.ones(total - 1, dtype=bool)
    keep[straddling] = False
    diff = np.diff(times)
    diff *= 1000.0
    return diff[keep], itl_count


def _token_intervals(records: Sequence[RequestRecord]) -> tuple[np.ndarray, np.ndarray]:
    """Pooled chunk-to-chunk intervals (ms) and the count per record."""
    return _intervals(*_chunk_times(records))


def _tbt_ms(itl_ms: np.ndarray, itl_count: np.ndarray) -> np.ndarray:
    """Mooncake TBT per record: mean of the slowest ceil(10%) of its intervals (NaN without intervals).

    Records are processed in groups of equal interval count k, so each group is one (records x k)
    block and the m = ceil(k / 10) slowest intervals per row come from one ``np.partition``.
    """
    tbt = np.full(itl_count.size, np.nan)
    if itl_ms.size == 0:
        return tbt
    first = np.cumsum(itl_count) - itl_count  # offset of each record's first interval in itl_ms
    by_count = np.argsort(itl_count, kind="stable")
    sorted_counts = itl_count[by_count]
    group_starts = np.flatnonzero(np.diff(sorted_counts, prepend=-1))
    group_ends = np.append(group_starts[1:], sorted_counts.size)
    for lo, hi in zip(group_starts, group_ends, strict=True):
        k = int(sorted_counts[lo])
        if k == 0:
            continue
        rows = by_count[lo:hi]
        block = itl_ms[first[rows][:, None] + np.arange(k)]
        m = -(-k // TBT_SLOWEST_DIVISOR)  # ceil(k / 10) in integers, >= 1
        slowest = np.partition(block, k - m, axis=1)[:, k - m :]
        tbt[rows] = slowest.sum(axis=1) / m
    return tbt


def extract_columns(records: Iterable[RequestRecord] | RecordColumns | RecordFieldColumns) -> RecordColumns:
    """The columns of ``records`` (returned as they are when already extracted; from their fields when an
    engine gave them as :class:`~vocab.records.RecordFieldColumns`)."""
    if isinstance(records, RecordColumns):
        return records
    if isinstance(records, RecordFieldColumns):
        return columns_from_fields(records.fields, records.chunk_times_s, records.n_chunks, records.extra)
    records = records if isinstance(records, list | tuple) else list(records)
    fields: dict[str, np.ndarray] = {
        "request_id": _int_column(records, "request_id"),
        "status": np.array(list(map(str, map(operator.attrgetter("status"), records))), dtype=object),
        "arrival_s": _float_column(records, "arrival_s"),
        "sent_s": _float_column(records, "sent_s"),
        "first_token_s": _float_column(records, "first_token_s"),
        "finish_s": _float_column(records, "finish_s"),
        "n_out": _int_column(records, "n_out"),
        "output_length": _int_column(records, "output_length"),
        "input_length": _int_column(records, "input_length"),
        "cached_tokens": _int_column(records, "cached_tokens"),
        "instance": np.array(list(map(operator.attrgetter("instance"), records)), dtype=object),
        "prefix_group": _int_column(records, "prefix_group"),
        "shared_prefix_len": _int_column(records, "shared_prefix_len"),
        "session_id": _int_column(records, "session_id"),
        "turn": _int_column(records, "turn"),
        "error": np.array(list(map(operator.attrgetter("error"), records)), dtype=object),
    }
    times, n_chunks = _chunk_times(records)
    extras = list(map(operator.attrgetter("extra"), records))
    extra_keys = dict.fromkeys(itertools.chain.from_iterable(extras))  # every key, in order of first appearance
    try:  # every record has every key (the simulator's records)
        extra = {key: list(map(operator.itemgetter(key), extras)) for key in extra_keys}
    except KeyError:
        extra = {key: [e.get(key, math.nan) for e in extras] for key in extra_keys}
    return columns_from_fields(fields, times, n_chunks, extra)


def columns_from_fields(fields: Mapping[str, np.ndarray], times: np.ndarray, n_chunks: np.ndarray,
                        extra: dict[str, list[Any]]) -> RecordColumns:
    """The :class:`RecordColumns` of records given field by field (as in
    :class:`~vocab.records.RecordFieldColumns`); the per-request metrics (TTFT, TPOT, E2E, TBT, interval
    count, issue lag) are computed here."""
    arrival, sent, first, finish = (fields[k] for k in ("arrival_s", "sent_s", "first_token_s", "finish_s"))
    n_out = fields["n_out"]
    ttft = (first - arrival) * 1000.0
    e2e = (finish - arrival) * 1000.0
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(n_out > 1, (e2e - ttft) / np.maximum(n_out - 1, 1), np.nan)
    itl_ms, itl_count = _intervals(times, n_chunks)
    columns: dict[str, np.ndarray] = {
        "request_id": fields["request_id"],
        "status": fields["status"],
        "arrival_s": arrival,
        "sent_s": sent,
        "first_token_s": first,
        "finish_s": finish,
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "e2e_ms": e2e,
        "tbt_ms": _tbt_ms(itl_ms, itl_count),
        "itl_count": itl_count,
        "issue_lag_ms": (sent - arrival) * 1000.0,
        **{key: fields[key] for key in RECORD_FIELD_COLUMNS[6:]},
    }
    return RecordColumns(columns, extra, itl_ms, itl_count, times, n_chunks)


def _frame(ex: RecordColumns) -> pd.DataFrame:
    import pandas as pd

    data: dict[str, Any] = dict(ex.columns)
    for key, values in ex.extra.items():
        data[f"extra_{key}"] = values
    return pd.DataFrame(data, columns=[*FRAME_COLUMNS, *(f"extra_{k}" for k in ex.extra)])


def request_frame(records: Iterable[RequestRecord] | RecordColumns) -> pd.DataFrame:
    """One row per record: identity, status, raw times (s), per-request metrics (ms) and ``extra_<key>``.

    Metric columns are ``ttft_ms``, ``tpot_ms``, ``e2e_ms``, ``tbt_ms``, ``itl_count`` and
    ``issue_lag_ms``; undefined values are NaN (e.g. ``tpot_ms`` when ``n_out <= 1``). ``status`` holds
    the plain string value (``"ok"``, ``"failed"``...). Rows of every status are included.
    """
    return _frame(extract_columns(records))


def token_intervals_ms(records: Iterable[RequestRecord], ok_only: bool = True) -> np.ndarray:
    """Pooled inter-token latencies (ms) of all records (only ``ok`` ones by default), in record order."""
    recs = [r for r in records if not ok_only or str(r.status) == _OK]
    return _token_intervals(recs)[0]


# --------------------------------------------------------------------------------------------------
# SLOs and run-level metrics
# --------------------------------------------------------------------------------------------------


def slo_mask(frame: pd.DataFrame | Mapping[str, np.ndarray], slo: SLOConfig) -> np.ndarray:
    """Boolean array over ``frame`` rows: True where the request meets every configured bound of ``slo``.
    ``frame`` is a :func:`request_frame` or its columns as arrays (:attr:`RecordColumns.columns`).

    Only ``ok`` requests can meet an SLO. A bound holds when ``value <= bound``; an undefined (NaN)
    value violates it, except ``tpot_ms``/``tbt_ms`` of a request with ``n_out <= 1``, which has no
    inter-token interval and meets those bounds vacuously.
    """
    return _slo_mask({key: np.asarray(frame[key]) for key in ("status", "n_out", *BOUND_KEYS) if key in frame}, slo)


def _slo_mask(columns: Mapping[str, np.ndarray], slo: SLOConfig) -> np.ndarray:
    """:func:`slo_mask` over columns (``request_frame`` names) as arrays."""
    mask = np.asarray(columns["status"] == _OK, dtype=bool)
    if mask.size == 0:
        return mask
    single_token = columns["n_out"] <= 1
    for key in BOUND_KEYS:
        bound = getattr(slo, key, None)  # duck-typed, so an OmegaConf node of SLOConfig works too
        if bound is None:
            continue
        within = np.asarray(columns[key], dtype=float) <= bound  # NaN compares False
        if key in PER_TOKEN_BOUNDS:
            within |= single_token
        mask &= within
    return mask


def _duration(arrival: np.ndarray, sent: np.ndarray, finish: np.ndarray) -> Optional[float]:
    """Earliest scheduled arrival to latest finish (latest send if nothing finished); None if unknown."""
    arrival = arrival[np.isfinite(arrival)]
    if arrival.size == 0:
        return None
    ends = finish[np.isfinite(finish)]
    if ends.size == 0:
        ends = sent[np.isfinite(sent)]
    if ends.size == 0:
        return None
    return max(float(ends.max() - arrival.min()), 0.0)


def run_duration_s(records: Iterable[RequestRecord]) -> Optional[float]:
    """Run duration in seconds: earliest scheduled arrival to latest finish (or send); None if unknown."""
    recs = list(records)
    return _duration(
        _float_column(recs, "arrival_s"), _float_column(recs, "sent_s"), _float_column(recs, "finish_s")
    )


def _rate(count: float, duration_s: Optional[float]) -> Optional[float]:
    if duration_s is None or duration_s <= 0:
        return None
    return float(count) / duration_s


def _ratio(num: float, den: float) -> Optional[float]:
    return float(num) / float(den) if den > 0 else None


def _per_gpu(value: Optional[float], n_gpus: int) -> Optional[float]:
    return None if value is None else value / n_gpus


def summarize(records: Iterable[RequestRecord] | RecordColumns, slo: SLOConfig, n_gpus: int = 1) -> dict[str, Any]:
    """Flat, JSON-able metrics of one run (see ``docs/metrics.md`` for every definition); ``records`` may be
    given as their :class:`RecordColumns`.

    Counts and rates cover all issued records; latency statistics cover ``ok`` requests only;
    SLO attainment divides the SLO-meeting ``ok`` requests by *all* issued requests.
    """
    if isinstance(n_gpus, bool) or not isinstance(n_gpus, (int, np.integer)) or n_gpus < 1:
        raise ValueError(f"n_gpus: must be an integer >= 1, got {n_gpus!r}")
    n_gpus = int(n_gpus)
    ex = extract_columns(records)
    cols = ex.columns

    status = cols["status"]
    ok = status == _OK
    n_issued = len(ex)
    n_ok = int(ok.sum())
    n_failed = int((status == RequestStatus.FAILED.value).sum())
    n_rejected = int((status == RequestStatus.REJECTED.value).sum())
    n_unfinished = int((status == RequestStatus.UNFINISHED.value).sum())
    n_other = n_issued - n_ok - n_failed - n_rejected - n_unfinished
    if n_other:
        log.warning("%d records have an unknown status; they count as issued and as SLO violations", n_other)

    duration_s = _duration(cols["arrival_s"], cols["sent_s"], cols["finish_s"])
    out_tokens = int(cols["n_out"][ok].sum())
    in_tokens = int(cols["input_length"][ok].sum())
    met = _slo_mask(cols, slo)
    n_met = int(met.sum())
    attainment = _ratio(n_met, n_issued)

    reports_cache = ok & (cols["cached_tokens"] >= 0)
    cache_hit_fraction = (
        _ratio(int(cols["cached_tokens"][reports_cache].sum()), int(cols["input_length"][reports_cache].sum()))
        if reports_cache.any()
        else None
    )

    request_rps = _rate(n_ok, duration_s)
    goodput = _rate(n_met, duration_s)
    sent = np.sort(cols["sent_s"][np.isfinite(cols["sent_s"])])
    issue_span = float(sent[-1] - sent[0]) if len(sent) >= 2 else 0.0
    achieved_issue_rate = (len(sent) - 1) / issue_span if issue_span > 0 else None
    summary: dict[str, Any] = {
        "n_issued": n_issued,
        "n_ok": n_ok,
        "n_failed": n_failed,
        "n_rejected": n_rejected,
        "n_unfinished": n_unfinished,
        "error_rate": _ratio(n_failed, n_issued),
        "duration_s": duration_s,
        "achieved_issue_rate_rps": achieved_issue_rate,
        "n_output_tokens": out_tokens,
        "n_input_tokens": in_tokens,
        "request_throughput_rps": request_rps,
        "request_throughput_rps_per_gpu": _per_gpu(request_rps, n_gpus),
        "output_throughput_tps": _rate(out_tokens, duration_s),
        "input_throughput_tps": _rate(in_tokens, duration_s),
    }
    ok_itl = ex.itl_ms if ok.all() else ex.itl_ms[np.repeat(ok, ex.itl_count)]
    for name in LATENCY_METRICS:
        values = ok_itl if name == "itl_ms" else cols[name][ok]
        summary.update(describe(values, name))
    summary.update(
        {
            "slo_name": slo.name,
            "slo_attainment_target": float(slo.attainment_target),
            "n_slo_met": n_met,
            "slo_attainment": attainment,
            "meets_attainment_target": bool(attainment is not None and attainment >= slo.attainment_target),
            "goodput_rps": goodput,
            "goodput_rps_per_gpu": _per_gpu(goodput, n_gpus),
            "n_gpus": n_gpus,
            "cache_hit_fraction": cache_hit_fraction,
            "percentile_method": PERCENTILE_METHOD,
        }
    )
    return {key: _jsonable(value) for key, value in summary.items()}


def _jsonable(value: Any) -> Any:
    """Plain Python scalars only; non-finite floats become None."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return _finite_or_none(float(value))
    return value
