"""Run folders: atomic writes of config, tables, per-request records and ``summary.json``.

Every file is written to a temporary name in the same folder, flushed to disk (``fsync``) and moved
into place with ``os.replace``, after which the folder itself is synced: a reader, a crash or a power
loss never sees a half-written file, and a ``summary.json`` only says ``ok`` once everything it points to
exists. ``summary.json`` is written with its secrets redacted (:mod:`harness.redaction`).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import operator
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np
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


def _chunk_column(chunks: Sequence[tuple[float, ...]], flat: Optional[np.ndarray] = None) -> Any:
    """The ``chunk_times_s`` column: each record's times as a float64 array, views into one flat array
    (``flat``: all of them end to end, when the caller has it). It is written to parquet exactly as lists
    of floats would be (``list<double>``), several times faster; when the lists would not be all floats (no
    times at all, or integers) they are lists, as they always were."""
    lengths = np.fromiter(map(len, chunks), dtype=np.int64, count=len(chunks))
    total = int(lengths.sum())
    if not total or any(type(c[0]) is not float for c in chunks if c):
        return [list(c) for c in chunks]
    if flat is None or flat.size != total:
        flat = np.fromiter(itertools.chain.from_iterable(chunks), dtype=np.float64, count=total)
    ends = np.cumsum(lengths).tolist()
    column = np.empty(len(chunks), dtype=object)
    for i, (start, end) in enumerate(zip([0, *ends[:-1]], ends, strict=True)):
        column[i] = flat[start:end]  # one by one: a list of equal-length arrays would be read as a matrix
    return column


def _float_texts(values: list[float], array: np.ndarray) -> list[str]:
    """``repr`` of each float (``array``: the same as float64), computed once per distinct value when most
    repeat (0.0 and -0.0 compare equal but print differently: with a -0.0 among them, each is printed)."""
    distinct = dict.fromkeys(values)
    if 2 * len(distinct) > len(values) or np.signbit(array[array == 0.0]).any():
        return list(map(float.__repr__, values))
    text = {v: float.__repr__(v) for v in distinct}
    return list(map(text.__getitem__, values))


def _json_values(values: list[Any]) -> Optional[list[str]]:
    """Each value as ``json.dumps`` writes it, when all are finite floats or all are ints (else None)."""
    types = set(map(type, values))
    if types == {float}:
        array = np.array(values, dtype=np.float64)
        return _float_texts(values, array) if np.isfinite(array).all() else None
    if types == {int}:
        return list(map(int.__repr__, values))
    return None


def _extra_column(extras: Sequence[dict[str, Any]]) -> list[str]:
    """``json.dumps(extra, sort_keys=True)`` of every record; built column by column when every record has
    the same keys holding plain numbers (the simulator's), character for character the same."""
    keys = sorted(extras[0]) if extras else []
    if extras and all(isinstance(k, str) for k in keys) and all(e.keys() == extras[0].keys() for e in extras):
        values = [_json_values([e[k] for e in extras]) for k in keys]
        if all(v is not None for v in values):
            if not keys:
                return ["{}"] * len(extras)
            template = "{{" + ", ".join(json.dumps(k).replace("{", "{{").replace("}", "}}") + ": {}"
                                        for k in keys) + "}}"
            return list(map(template.format, *values))
    encoder = json.JSONEncoder(sort_keys=True)
    return [encoder.encode(e) for e in extras]


def records_frame(records: Sequence[RequestRecord], chunk_times_s: Optional[np.ndarray] = None) -> pd.DataFrame:
    """Column-wise conversion of records into a DataFrame (one row per request). ``chunk_times_s``: every
    record's chunk times end to end (:attr:`harness.metrics.RecordColumns.chunk_times_s`), when the caller
    has them; it saves gathering them again."""
    columns: dict[str, Any] = {name: list(map(operator.attrgetter(name), records)) for name in _RECORD_FIELDS}
    columns["status"] = list(map(str, columns["status"]))
    columns["chunk_times_s"] = _chunk_column(columns["chunk_times_s"], chunk_times_s)
    columns["extra"] = _extra_column(columns["extra"])
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
