"""Run folders: atomic writes of config, tables, per-request records and ``summary.json``.

Every file is written to a temporary name in the same folder, flushed to disk (``fsync``) and moved
into place with ``os.replace``, after which the folder itself is synced: a reader, a crash or a power
loss never sees a half-written file, and a ``summary.json`` only says ``ok`` once everything it points to
exists. ``summary.json`` is written with its secrets redacted (:mod:`harness.redaction`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from harness.atomic_files import write_atomically
from harness.records import RequestRecord, RequestStatus, RunSummary
from harness.redaction import redact
from harness.result_files import REQUESTS_FILE, SUMMARY_FILE

_RECORD_FIELDS = [f.name for f in dataclasses.fields(RequestRecord)]


def _atomic_write(path: Path, write: Callable[[Path], None]) -> Path:
    """Write ``path`` through ``write(tmp)``, atomically and durably (:mod:`harness.atomic_files`)."""
    return write_atomically(path, write)


def atomic_write_text(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically."""
    return _atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def _json_safe(value: Any) -> Any:
    """Replace NaN/inf by None and numpy scalars by Python ones, recursively."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def records_frame(records: Sequence[RequestRecord]) -> pd.DataFrame:
    """Column-wise conversion of records into a DataFrame (one row per request)."""
    columns: dict[str, list[Any]] = {name: [getattr(r, name) for r in records] for name in _RECORD_FIELDS}
    columns["status"] = [str(s) for s in columns["status"]]
    columns["chunk_times_s"] = [list(c) for c in columns["chunk_times_s"]]
    columns["extra"] = [json.dumps(e, sort_keys=True) for e in columns["extra"]]
    return pd.DataFrame(columns, columns=_RECORD_FIELDS)


def load_records(path: Path) -> list[RequestRecord]:
    """Read ``requests.parquet`` back into ``RequestRecord``s."""
    frame = pd.read_parquet(path)
    missing = [name for name in _RECORD_FIELDS if name not in frame.columns]
    if missing:
        raise ValueError(f"{path}: not a requests table, missing columns {missing}")
    out = []
    for row in frame.itertuples(index=False):
        values = {name: getattr(row, name) for name in _RECORD_FIELDS}
        values["status"] = RequestStatus(values["status"])
        values["chunk_times_s"] = tuple(float(t) for t in values["chunk_times_s"])
        values["extra"] = json.loads(values["extra"]) if values["extra"] else {}
        for name in ("request_id", "input_length", "output_length", "n_out", "cached_tokens",
                     "prefix_group", "shared_prefix_len", "session_id", "turn"):
            values[name] = int(values[name])
        out.append(RequestRecord(**values))
    return out


class RunFolder:
    """One job's output folder: ``results/<experiment>/<job>/``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    def file(self, name: str) -> Path:
        return self.path / name

    def write_text(self, name: str, text: str) -> Path:
        return atomic_write_text(self.path / name, text)

    def write_json(self, name: str, obj: Any) -> Path:
        return self.write_text(name, json.dumps(_json_safe(obj), indent=2, sort_keys=False) + "\n")

    def write_table(self, name: str, frame: pd.DataFrame) -> Path:
        """Write a table as parquet (``.parquet``) or CSV (``.csv``), atomically."""
        if name.endswith(".parquet"):
            return _atomic_write(self.path / name, lambda tmp: frame.to_parquet(tmp, index=False))
        if name.endswith(".csv"):
            return _atomic_write(self.path / name, lambda tmp: frame.to_csv(tmp, index=False))
        raise ValueError(f"table name must end in .parquet or .csv, got {name!r}")

    def write_records(self, records: Sequence[RequestRecord]) -> Path:
        return self.write_table(REQUESTS_FILE, records_frame(records))

    def write_summary(self, summary: RunSummary) -> Path:
        """Write ``summary.json`` with secrets redacted (overrides, choices, metrics, reason ...)."""
        return self.write_json(SUMMARY_FILE, redact(dataclasses.asdict(summary)))


def read_summary(folder: Path) -> dict[str, Any]:
    """Load a job's ``summary.json`` as a dict."""
    return json.loads((Path(folder) / SUMMARY_FILE).read_text(encoding="utf-8"))
