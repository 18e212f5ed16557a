"""Run folders: atomic writes of config, tables, per-request records and ``summary.json``.

Tables are pandas DataFrames; the requests table is :func:`records_frame`, or :func:`columns_frame` from the
records' columns when an engine gives them (the simulator).

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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from harness.redaction import redact
from vocab.atomic_files import write_atomically
from vocab.records import RequestRecord, RequestStatus, RunSummary
from vocab.result_files import REQUESTS_FILE, SUMMARY_FILE

if TYPE_CHECKING:  # pandas is imported by the functions that make or read a DataFrame, when called
    import pandas as pd

    from harness.metrics import RecordColumns

_RECORD_FIELDS = [f.name for f in dataclasses.fields(RequestRecord)]


def _atomic_write(path: Path, write: Callable[[Path], None]) -> Path:
    """Write ``path`` through ``write(tmp)``, atomically and durably (:mod:`vocab.atomic_files`)."""
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
    """``repr`` of each float (``array``: the same as float64, all finite), computed once per distinct value
    when most repeat (0.0 and -0.0 compare equal but print differently: with a -0.0 among them, each is
    printed)."""
    distinct, inverse = np.unique(array, return_inverse=True)
    if 2 * distinct.size > len(values) or np.signbit(array[array == 0.0]).any():
        return list(map(float.__repr__, values))
    texts = list(map(float.__repr__, distinct.tolist()))
    return list(map(texts.__getitem__, inverse.tolist()))


_NON_FINITE_TEXTS = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}  # json.dumps' spellings


def _json_values(values: list[Any]) -> Optional[list[str]]:
    """Each value as ``json.dumps`` writes it, when all are floats or all are ints (else None)."""
    types = set(map(type, values))
    if types == {float}:
        array = np.array(values, dtype=np.float64)
        finite = np.isfinite(array)
        if finite.all():
            return _float_texts(values, array)
        texts = _float_texts(values, np.where(finite, array, 0.0)) if finite.any() else [""] * len(values)
        for i in np.flatnonzero(~finite).tolist():
            texts[i] = _NON_FINITE_TEXTS[repr(values[i])]
        return texts
    if types == {int}:
        return list(map(int.__repr__, values))
    return None


def _extra_column(extras: Sequence[dict[str, Any]], gathered: Optional[Mapping[str, list[Any]]] = None) -> list[str]:
    """``json.dumps(extra, sort_keys=True)`` of every record; built column by column when every record has
    the same keys holding plain numbers (the simulator's), character for character the same. ``gathered``:
    each key's values over the records (:attr:`harness.metrics.RecordColumns.extra`), when the caller has them."""
    keys = sorted(extras[0]) if extras else []
    if extras and all(isinstance(k, str) for k in keys) and all(e.keys() == extras[0].keys() for e in extras):
        if gathered is None or gathered.keys() != extras[0].keys() or \
                any(len(v) != len(extras) for v in gathered.values()):
            gathered = {k: [e[k] for e in extras] for k in keys}
        texts = _number_extra_texts(gathered, len(extras))
        if texts is not None:
            return texts
    encoder = json.JSONEncoder(sort_keys=True)
    return [encoder.encode(e) for e in extras]


def _number_extra_texts(gathered: Mapping[str, list[Any]], n: int) -> Optional[list[str]]:
    """``json.dumps(extra, sort_keys=True)`` of ``n`` records whose ``extra`` holds the keys of ``gathered``
    (strings) and, under each, its values over the records, built column by column; None unless every
    key's values are all floats or all ints."""
    keys = sorted(gathered)
    values = [_json_values(gathered[k]) for k in keys]
    if any(v is None for v in values):
        return None
    if not keys:
        return ["{}"] * n
    # "{" key0 ": " text0 ", " key1 ": " text1 ... "}", joined row by row
    pieces: list[Any] = []
    for i, (key, texts) in enumerate(zip(keys, values, strict=True)):
        pieces += [itertools.repeat(("{" if i == 0 else ", ") + json.dumps(key) + ": "), texts]
    pieces.append(itertools.repeat("}"))
    return list(map("".join, zip(*pieces, strict=False)))  # the repeats end with the texts


def _record_columns(records: Sequence[RequestRecord],
                    extra: Optional[Mapping[str, list[Any]]] = None) -> dict[str, list[Any]]:
    """Every field of the records as a list (``status`` as its string value, ``extra`` as JSON text)."""
    columns: dict[str, Any] = {name: list(map(operator.attrgetter(name), records)) for name in _RECORD_FIELDS}
    columns["status"] = list(map(str, columns["status"]))
    columns["extra"] = _extra_column(columns["extra"], extra)
    return columns


def records_frame(records: Sequence[RequestRecord], chunk_times_s: Optional[np.ndarray] = None) -> pd.DataFrame:
    """Column-wise conversion of records into a DataFrame (one row per request). ``chunk_times_s``: every
    record's chunk times end to end (:attr:`harness.metrics.RecordColumns.chunk_times_s`), when the caller
    has them; it saves gathering them again."""
    import pandas as pd

    columns = _record_columns(records)
    columns["chunk_times_s"] = _chunk_column(columns["chunk_times_s"], chunk_times_s)
    return pd.DataFrame(columns, columns=_RECORD_FIELDS)


def columns_frame(columns: RecordColumns) -> Optional[pd.DataFrame]:
    """The records' table (what :func:`records_frame` makes of them) from their columns alone, for records
    that all hold the same ``extra`` keys (strings) and at least one chunk time between them, all floats
    (the simulator's); None otherwise (the records' own table is then the one to write)."""
    extra = columns.extra
    if not columns.chunk_times_s.size or not all(isinstance(k, str) for k in extra):
        return None
    n = len(columns)
    texts = _number_extra_texts(extra, n)
    if texts is None:
        encoder = json.JSONEncoder(sort_keys=True)
        texts = [encoder.encode(dict(zip(extra, row, strict=True))) for row in zip(*extra.values(), strict=True)] \
            if extra else ["{}"] * n
    import pandas as pd

    ends = np.cumsum(columns.n_chunks).tolist()
    rows = np.empty(n, dtype=object)
    for i, (start, end) in enumerate(zip([0, *ends[:-1]], ends, strict=True)):
        rows[i] = columns.chunk_times_s[start:end]  # one by one, as records_frame makes them
    values = columns.columns
    data: dict[str, Any] = {}
    for name in _RECORD_FIELDS:
        if name == "chunk_times_s":
            data[name] = rows
        elif name == "extra":
            data[name] = texts
        elif values[name].dtype == object:
            data[name] = values[name].tolist()
        else:
            data[name] = values[name]
    return pd.DataFrame(data, columns=_RECORD_FIELDS)


def load_records(path: Path) -> list[RequestRecord]:
    """Read ``requests.parquet`` back into ``RequestRecord``s."""
    import pandas as pd

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

    def write_table(self, name: str, table: pd.DataFrame) -> Path:
        """Write a DataFrame as parquet (``.parquet``) or CSV (``.csv``), atomically."""
        if name.endswith(".parquet"):
            return _atomic_write(self.path / name, lambda tmp: table.to_parquet(tmp, index=False))
        if name.endswith(".csv"):
            return _atomic_write(self.path / name, lambda tmp: table.to_csv(tmp, index=False))
        raise ValueError(f"table name must end in .parquet or .csv, got {name!r}")

    def write_point_rows(self, name: str, points: Sequence[tuple[int, Sequence[Mapping[str, Any]]]]) -> Path:
        """Write every point's rows (dicts) as one table, a ``point`` column first."""
        import pandas as pd

        frames = []
        for point, rows in points:
            frame = pd.DataFrame(list(rows))
            frame.insert(0, "point", point)
            frames.append(frame)
        return self.write_table(name, pd.concat(frames, ignore_index=True))

    def write_records(self, records: Sequence[RequestRecord]) -> Path:
        return self.write_table(REQUESTS_FILE, records_frame(records))

    def write_summary(self, summary: RunSummary) -> Path:
        """Write ``summary.json`` with secrets redacted (overrides, choices, metrics, reason ...)."""
        return self.write_json(SUMMARY_FILE, redact(dataclasses.asdict(summary)))


def read_summary(folder: Path) -> dict[str, Any]:
    """Load a job's ``summary.json`` as a dict."""
    return json.loads((Path(folder) / SUMMARY_FILE).read_text(encoding="utf-8"))
