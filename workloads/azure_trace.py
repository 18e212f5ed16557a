"""Loader of the Azure LLM inference traces 2023 (CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``).

Timestamps such as ``2023-11-16 18:17:03.9799600`` are parsed exactly into integer 100-ns ticks since
0001-01-01 (the .NET ``DateTime.Ticks`` the files were written from), without floats on the way; arrival
= (ticks - first ticks) / 1e7 seconds. Digits are ASCII digits; token counts are integers in
``[1, MAX_REQUEST_TOKENS]``. The traces carry no prefix information, so every request gets its own hash ids
(``ceil(ContextTokens / block_size)`` of them, never shared).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from pathlib import Path
from typing import Optional

import numpy as np

from vocab.records import RequestSpec
from workloads.base import LoadedRequests, Workload
from workloads.config import MAX_REQUEST_TOKENS, AzureTraceConfig
from workloads.datadir import resolve_trace_path
from workloads.errors import TraceFormatError, not_utf8_error

logger = logging.getLogger(__name__)

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
TICKS_PER_SECOND = 10**7
_TIMESTAMP = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2}) ([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{0,7}))?")
_COUNT = re.compile(r"[0-9]{1,15}")  # longer: out of range anyway (and never parsed)
# every data row (each ending in a newline) in the shipped traces' form, with 7 fractional digits
_FIXED_ROWS = re.compile(rb"(?:[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{7},[0-9]{1,15},[0-9]{1,15}\n)+")


def parse_timestamp_ticks(text: str) -> int:
    """``YYYY-MM-DD HH:MM:SS[.fffffff]`` (0-7 fractional digits) -> integer 100-ns ticks since 0001-01-01.

    Raises ``ValueError`` for any other form or an impossible date or time.
    """
    match = _TIMESTAMP.fullmatch(text)
    if match is None:
        raise ValueError(
            f"got {text!r}, expected 'YYYY-MM-DD HH:MM:SS[.fffffff]' (up to 7 fractional digits)"
        )
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction = match.group(7) or ""
    try:
        days = dt.date(year, month, day).toordinal() - 1
    except ValueError as exc:
        raise ValueError(f"got {text!r}: {exc}") from None
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"got {text!r}: time of day out of range")
    seconds = days * 86400 + hour * 3600 + minute * 60 + second
    return seconds * TICKS_PER_SECOND + int(fraction.ljust(7, "0"))


def _count(path: Path, line_no: int, name: str, text: str) -> int:
    if _COUNT.fullmatch(text) is None or not 1 <= int(text) <= MAX_REQUEST_TOKENS:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise TraceFormatError(str(path), line_no, name,
                               f"got {shown!r}, expected an integer in [1, {MAX_REQUEST_TOKENS}]")
    return int(text)


def _days_since_0001(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray:
    """Proleptic Gregorian day number, 0 for 0001-01-01 (``date.toordinal() - 1``), of valid dates."""
    y = year - (month <= 2)
    era = y // 400
    year_of_era = y - era * 400
    day_of_year = (153 * (month + np.where(month > 2, -3, 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 306  # 0000-03-01 is day -306


def _digits(text: np.ndarray, start: np.ndarray, stop: np.ndarray, width: int) -> np.ndarray:
    """The decimal numbers ``text[start:stop]`` of every row (ASCII digits, at most ``width`` of them)."""
    place = np.arange(width)
    at = stop[:, None] - 1 - place
    digit = np.where(place < (stop - start)[:, None], text[np.maximum(at, 0)].astype(np.int64) - 48, 0)
    return digit @ (10 ** place)


def _fast_rows(lines: list[str]) -> Optional[tuple[list[int], list[int], list[int]]]:
    """Ticks, context and generated tokens of every data row, computed with array operations, when every row
    has the shipped traces' form (``YYYY-MM-DD HH:MM:SS.fffffff,<int>,<int>``) and passes every check;
    None otherwise (then :func:`_checked_rows` parses the rows one by one and names the first bad one)."""
    try:
        body = ("\n".join(lines[1:]) + "\n").encode("ascii")
    except UnicodeEncodeError:
        return None
    if _FIXED_ROWS.fullmatch(body) is None:
        return None
    text = np.frombuffer(body, dtype=np.uint8)
    ends = np.flatnonzero(text == ord("\n"))
    starts = np.concatenate(([0], ends[:-1] + 1))
    stamp = text[starts[:, None] + np.arange(27)].astype(np.int64) - ord("0")  # YYYY-MM-DD HH:MM:SS.fffffff

    def number(first: int, stop: int) -> np.ndarray:
        return stamp[:, first:stop] @ (10 ** np.arange(stop - first - 1, -1, -1, dtype=np.int64))

    year, month, day = number(0, 4), number(5, 7), number(8, 10)
    hour, minute, second, fraction = number(11, 13), number(14, 16), number(17, 19), number(20, 27)
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    month_days = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])[np.clip(month, 0, 12)] + (leap & (month == 2))
    if ((year < 1) | (month < 1) | (month > 12) | (day < 1) | (day > month_days) | (hour > 23) | (minute > 59)
            | (second > 59)).any():
        return None
    days = _days_since_0001(year, month, day)
    ticks = (days * 86400 + hour * 3600 + minute * 60 + second) * TICKS_PER_SECOND + fraction
    commas = np.flatnonzero(text == ord(",")).reshape(-1, 2)
    context = _digits(text, commas[:, 0] + 1, commas[:, 1], 15)
    generated = _digits(text, commas[:, 1] + 1, ends, 15)
    counts_ok = (context >= 1) & (context <= MAX_REQUEST_TOKENS) & (generated >= 1) & (generated <= MAX_REQUEST_TOKENS)
    if not counts_ok.all() or (np.diff(ticks) < 0).any():
        return None
    return ticks.tolist(), context.tolist(), generated.tolist()


def _checked_rows(path: Path, lines: list[str]) -> tuple[list[int], list[int], list[int]]:
    """Ticks, context and generated tokens of every data row, row by row; :class:`TraceFormatError` with
    the file and line at the first bad one."""
    all_ticks: list[int] = []
    contexts: list[int] = []
    generated_counts: list[int] = []
    previous_ticks: Optional[int] = None
    for line_no, line in enumerate(lines[1:], start=2):
        fields = line.split(",")
        if len(fields) != 3:
            raise TraceFormatError(
                str(path), line_no, "row", f"got {len(fields)} fields in {line!r}, expected 3 ({HEADER})"
            )
        try:
            ticks = parse_timestamp_ticks(fields[0])
        except ValueError as exc:
            raise TraceFormatError(str(path), line_no, "TIMESTAMP", str(exc)) from None
        if previous_ticks is not None and ticks < previous_ticks:
            raise TraceFormatError(
                str(path),
                line_no,
                "TIMESTAMP",
                f"got {fields[0]!r}, earlier than the previous row; expected non-decreasing",
            )
        all_ticks.append(ticks)
        contexts.append(_count(path, line_no, "ContextTokens", fields[1]))
        generated_counts.append(_count(path, line_no, "GeneratedTokens", fields[2]))
        previous_ticks = ticks
    return all_ticks, contexts, generated_counts


def load_azure_trace(path: str | Path, block_size: int = 512) -> LoadedRequests:
    """All rows of an Azure LLM inference CSV as specs (``arrival_s`` relative to the first row, ``timed``).

    Request ``i`` gets the fresh hash ids ``next_id .. next_id + ceil(ContextTokens / block_size) - 1``.
    Every problem raises :class:`TraceFormatError` with the file and line. A well-formed file is parsed
    with array operations; any row they do not accept sends the file through the row-by-row parser, which
    names the problem (both give the same ticks).
    """
    path = Path(path)
    try:
        with path.open("r", encoding="utf-8-sig", newline=None) as fh:
            lines = fh.read().split("\n")
    except UnicodeDecodeError:
        raise not_utf8_error(path) from None
    if lines and lines[-1] == "":
        lines.pop()  # the terminator of the last line
    header = lines[0] if lines else ""
    if header != HEADER:
        raise TraceFormatError(str(path), 1, "header", f"got {header!r}, expected exactly {HEADER!r}")
    if len(lines) < 2:
        raise TraceFormatError(str(path), 2, "row", "no data rows after the header")
    all_ticks, contexts, generated_counts = _fast_rows(lines) or _checked_rows(path, lines)
    first_ticks = all_ticks[0]
    specs: list[RequestSpec] = []
    next_id = 0
    for i, (ticks, context, generated) in enumerate(zip(all_ticks, contexts, generated_counts, strict=True)):
        n_blocks = -(-context // block_size)
        specs.append(RequestSpec(i, (ticks - first_ticks) / TICKS_PER_SECOND, context, generated,
                                 tuple(range(next_id, next_id + n_blocks)), block_size))
        next_id += n_blocks
    stats = {
        "n_rows": len(specs),
        "first_timestamp": lines[1].split(",")[0],
        "first_timestamp_ticks": first_ticks,
        "last_timestamp": lines[-1].split(",")[0],
        "trace_duration_s": specs[-1].arrival_s,
    }
    return LoadedRequests(specs=tuple(specs), timed=True, source=str(path), stats=stats)


class AzureTraceWorkload(Workload):
    """Replay of an Azure LLM inference trace; no prefix sharing (unique hash ids per request)."""

    kind = "azure_trace"
    config_cls = AzureTraceConfig

    def __init__(self, cfg: AzureTraceConfig, data_dir: Optional[str] = None) -> None:
        super().__init__(cfg, data_dir)
        self.cfg: AzureTraceConfig = cfg
        self.path = resolve_trace_path(cfg.file, data_dir)

    def _load(self) -> LoadedRequests:
        return load_azure_trace(self.path, self.cfg.block_size)
