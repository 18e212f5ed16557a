"""Loader of Mooncake FAST'25 JSONL traces (``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids``).

The file is UTF-8 (a leading byte-order mark is allowed). Each row is validated: JSON object, fields
present with the right types (a bool is not an int), ``timestamp`` in ``[0, 1e15]`` ms and non-decreasing,
``input_length`` and ``output_length`` in ``[1, MAX_REQUEST_TOKENS]`` (the shipped traces' minimum is 1; a
request that generates nothing has no first token to time), hash ids in ``[0, 2**63)`` and
``len(hash_ids) == ceil(input_length / block_size)``. Unknown fields are ignored. In strict mode the first bad
row raises :class:`TraceFormatError` (``<path>:<line>: <field>: <problem>``); otherwise bad rows are skipped
and counted by reason.
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from pathlib import Path
from typing import Any, Optional

from vocab.records import RequestSpec
from workloads.base import LoadedRequests, Workload
from workloads.config import MAX_REQUEST_TOKENS, MooncakeTraceConfig
from workloads.datadir import resolve_trace_path
from workloads.errors import TraceFormatError, not_utf8_error

logger = logging.getLogger(__name__)

_MAX_HASH_ID = 2**63
MAX_TIMESTAMP_MS = 1e15  # about 31,700 years: a larger timestamp is a corrupt value
_DEBUG_REASONS = 5  # skipped rows whose reason is logged at debug level


class _BadRow(Exception):
    """A row problem: ``field``, a short ``reason`` (the counting key) and the full ``problem``."""

    def __init__(self, field: str, reason: str, problem: str) -> None:
        super().__init__(problem)
        self.field = field
        self.reason = reason
        self.problem = problem


def _int_field(obj: dict[str, Any], name: str, minimum: int, maximum: int = MAX_REQUEST_TOKENS) -> int:
    expected = f"expected an integer in [{minimum}, {maximum}]"
    if name not in obj:
        raise _BadRow(name, "missing", f"missing, {expected}")
    value = obj[name]
    if type(value) is not int:
        raise _BadRow(name, "wrong type", f"got {type(value).__name__} {_short(value)}, {expected}")
    if not minimum <= value <= maximum:
        raise _BadRow(name, "out of range", f"got {_short(value)}, {expected}")
    return value


def _short(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters (a corrupt row may hold a huge value)."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**limit else f"an integer of {len(str(abs(value)))} digits"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _timestamp(obj: dict[str, Any], previous: Optional[float]) -> float:
    if "timestamp" not in obj:
        raise _BadRow("timestamp", "missing", "missing, expected a number of milliseconds >= 0")
    value = obj["timestamp"]
    if type(value) not in (int, float):
        raise _BadRow(
            "timestamp",
            "wrong type",
            f"got {type(value).__name__} {_short(value)}, expected a number of milliseconds >= 0",
        )
    if not (math.isfinite(value) if type(value) is float else True) or not 0 <= value <= MAX_TIMESTAMP_MS:
        raise _BadRow(
            "timestamp", "out of range",
            f"got {_short(value)}, expected a finite number of milliseconds in [0, {MAX_TIMESTAMP_MS:g}]",
        )
    if previous is not None and value < previous:
        raise _BadRow(
            "timestamp",
            "decreasing",
            f"got {value}, less than the previous row's {previous}; expected non-decreasing",
        )
    return value


def _hash_ids(obj: dict[str, Any], input_length: int, block_size: int) -> tuple[int, ...]:
    if "hash_ids" not in obj:
        raise _BadRow("hash_ids", "missing", "missing, expected a list of integers")
    value = obj["hash_ids"]
    if type(value) is not list:
        raise _BadRow("hash_ids", "wrong type", f"got {type(value).__name__}, expected a list of integers")
    if not all(type(h) is int for h in value) or (
        value and not (min(value) >= 0 and max(value) < _MAX_HASH_ID)
    ):
        # Slow path, only for a bad row: find the first offending element.
        for i, h in enumerate(value):
            if type(h) is not int:
                raise _BadRow(
                    "hash_ids", "wrong type", f"element {i} is {type(h).__name__} {h!r}, expected an integer"
                )
            if not 0 <= h < _MAX_HASH_ID:
                raise _BadRow(
                    "hash_ids", "out of range", f"element {i} is {h}, expected an integer in [0, 2**63)"
                )
    expected = -(-input_length // block_size)
    if len(value) != expected:
        raise _BadRow(
            "hash_ids",
            "length mismatch",
            f"has {len(value)} ids, expected ceil(input_length / block_size) = "
            f"ceil({input_length} / {block_size}) = {expected}",
        )
    return tuple(value)


def _parse_row(
    line: str, block_size: int, previous_ts: Optional[float]
) -> tuple[float, int, int, tuple[int, ...]]:
    if not line.strip():
        raise _BadRow("row", "empty line", "empty line, expected one JSON object per line")
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise _BadRow("row", "invalid JSON", f"invalid JSON ({exc.msg} at column {exc.colno})") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise _BadRow("row", "invalid JSON", f"invalid JSON ({str(exc).split(':')[0]})") from None
    except RecursionError:
        raise _BadRow("row", "invalid JSON", "invalid JSON (nested too deeply)") from None
    if not isinstance(obj, dict):
        raise _BadRow("row", "not an object", f"got a JSON {type(obj).__name__}, expected a JSON object")
    ts = _timestamp(obj, previous_ts)
    input_length = _int_field(obj, "input_length", 1)
    output_length = _int_field(obj, "output_length", 1)
    hash_ids = _hash_ids(obj, input_length, block_size)
    return ts, input_length, output_length, hash_ids


def load_mooncake_trace(path: str | Path, block_size: int = 512, strict: bool = True) -> LoadedRequests:
    """All valid rows of a Mooncake JSONL trace as specs (``arrival_s`` = timestamp / 1000, ``timed``).

    ``strict``: raise :class:`TraceFormatError` at the first bad row; otherwise skip and count bad rows
    (``stats['n_skipped_rows']``, ``stats['skipped_reasons']``: ``"<field>: <reason>" -> count``).
    """
    path = Path(path)
    specs: list[RequestSpec] = []
    reasons: Counter[str] = Counter()
    previous_ts: Optional[float] = None
    n_lines = 0
    try:
        with path.open("r", encoding="utf-8-sig") as fh:
            for line_no, line in enumerate(fh, start=1):
                n_lines = line_no
                try:
                    ts, input_length, output_length, hash_ids = _parse_row(line, block_size, previous_ts)
                except _BadRow as bad:
                    if strict:
                        raise TraceFormatError(str(path), line_no, bad.field, bad.problem) from None
                    reasons[f"{bad.field}: {bad.reason}"] += 1
                    if sum(reasons.values()) <= _DEBUG_REASONS:
                        logger.debug("%s:%d: skipped: %s: %s", path, line_no, bad.field, bad.problem)
                    continue
                previous_ts = ts
                specs.append(
                    RequestSpec(
                        request_id=len(specs),
                        arrival_s=ts / 1000.0,
                        input_length=input_length,
                        output_length=output_length,
                        hash_ids=hash_ids,
                        block_size=block_size,
                    )
                )
    except UnicodeDecodeError:
        raise not_utf8_error(path) from None
    if n_lines == 0:
        raise TraceFormatError(str(path), 1, "row", "the file is empty, expected one JSON object per line")
    n_skipped = sum(reasons.values())
    if n_skipped:
        logger.warning(
            "%s: skipped %d of %d rows (%s)",
            path,
            n_skipped,
            n_lines,
            ", ".join(f"{k}: {v}" for k, v in reasons.items()),
        )
    stats = {
        "n_rows": n_lines,
        "n_skipped_rows": n_skipped,
        "skipped_reasons": dict(reasons),
        "trace_duration_s": (specs[-1].arrival_s - specs[0].arrival_s) if specs else 0.0,
    }
    return LoadedRequests(specs=tuple(specs), timed=True, source=str(path), stats=stats)


class MooncakeTraceWorkload(Workload):
    """Replay of a Mooncake JSONL trace; the trace's hash ids carry its prefix sharing."""

    kind = "mooncake_trace"
    config_cls = MooncakeTraceConfig

    def __init__(self, cfg: MooncakeTraceConfig, data_dir: Optional[str] = None) -> None:
        super().__init__(cfg, data_dir)
        self.cfg: MooncakeTraceConfig = cfg
        self.path = resolve_trace_path(cfg.file, data_dir)

    def _load(self) -> LoadedRequests:
        return load_mooncake_trace(self.path, self.cfg.block_size, self.cfg.strict)
