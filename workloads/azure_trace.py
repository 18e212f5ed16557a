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

from harness.records import RequestSpec
from workloads.base import LoadedRequests, Workload
from workloads.config import MAX_REQUEST_TOKENS, AzureTraceConfig
from workloads.datadir import resolve_trace_path
from workloads.errors import TraceFormatError, not_utf8_error

logger = logging.getLogger(__name__)

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
TICKS_PER_SECOND = 10**7
_TIMESTAMP = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2}) ([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{0,7}))?")
_COUNT = re.compile(r"[0-9]{1,15}")  # longer: out of range anyway (and never parsed)


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


def load_azure_trace(path: str | Path, block_size: int = 512) -> LoadedRequests:
    """All rows of an Azure LLM inference CSV as specs (``arrival_s`` relative to the first row, ``timed``).

    Request ``i`` gets the fresh hash ids ``next_id .. next_id + ceil(ContextTokens / block_size) - 1``.
    Every problem raises :class:`TraceFormatError` with the file and line.
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
    specs: list[RequestSpec] = []
    first_ticks: Optional[int] = None
    previous_ticks: Optional[int] = None
    next_id = 0
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
        context = _count(path, line_no, "ContextTokens", fields[1])
        generated = _count(path, line_no, "GeneratedTokens", fields[2])
        if first_ticks is None:
            first_ticks = ticks
        previous_ticks = ticks
        n_blocks = -(-context // block_size)
        specs.append(
            RequestSpec(
                request_id=len(specs),
                arrival_s=(ticks - first_ticks) / TICKS_PER_SECOND,
                input_length=context,
                output_length=generated,
                hash_ids=tuple(range(next_id, next_id + n_blocks)),
                block_size=block_size,
            )
        )
        next_id += n_blocks
    if not specs:
        raise TraceFormatError(str(path), 2, "row", "no data rows after the header")
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
