"""Tables as named columns, written to parquet and CSV exactly as pandas writes the same DataFrame, without
importing pandas.

A run that draws no figures needs no DataFrame: its tables (``requests.parquet``, ``points.csv``,
``load.csv``) are built here column by column and written with pyarrow and the ``csv`` module. A
:class:`Table` is made the ways the harness made its DataFrames, ``pd.DataFrame({name: values})``
(:meth:`Table.from_columns`), ``pd.DataFrame(rows)`` (:meth:`Table.from_rows`), ``frame.insert(loc, name,
scalar)`` (:meth:`Table.insert`) and ``pd.concat(frames, ignore_index=True)`` (:meth:`Table.concat`), and
each column gets the dtype pandas (3.x) gives it: ``int64``, ``float64`` (ints with missing values, ints and
floats), ``bool``, ``str`` (strings, missing values as NaN) or ``object`` (None only, mixed kinds, lists,
arrays). Then

- :meth:`Table.write_parquet` writes what ``frame.to_parquet(path, index=False)`` writes: the same Arrow
  types (NaN as null, strings as ``large_string``), the same ``pandas`` schema metadata (so
  ``pandas.read_parquet`` gives back the frame, dtypes included), the same writer options; the bytes are
  the same;
- :meth:`Table.write_csv` writes what ``frame.to_csv(path, index=False)`` writes, byte for byte (floats as
  numpy prints them, missing values as empty fields);
- :meth:`Table.to_pandas` builds the DataFrame itself, by the pandas calls the table stands for (it
  imports pandas), for callers that want one (trackers, studies, tests).

Values whose pandas dtype this module does not work out (numpy scalars other than int64/float64/bool,
integers beyond int64, dates, decimals ...) and concatenations of parts whose dtypes differ other than
int64 with float64 are left to pandas: such a table is written through :meth:`Table.to_pandas`, so the
file is still the one pandas writes.

The Arrow arrays are built from numpy buffers: ``pyarrow.array()`` imports pandas (to recognise pandas
objects) on its first call, so only an ``object`` column of mixed values goes through it. The layout
followed is pandas 3's (the version this suite runs: ``str`` columns are ``large_string``, ``numpy_type``
``"str"``). Under an older pandas (2.x holds strings as ``object`` and infers some dtypes otherwise) every
table is written through pandas, as before.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Optional

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

# dtypes this module writes itself (pandas' names: str(frame[name].dtype))
INT, FLOAT, BOOL, STR, OBJECT = "int64", "float64", "bool", "str", "object"
LIST = "list"  # lists of floats held as one flat float64 array and offsets; an object column for pandas
PARQUET_COMPRESSION = "snappy"  # DataFrame.to_parquet's default

_NONE = type(None)
_INT_TYPES = frozenset({int, np.int64})
_FLOAT_TYPES = frozenset({float, np.float64})
_NUMBER_TYPES = _INT_TYPES | _FLOAT_TYPES | {_NONE}
_BOOL_TYPES = frozenset({bool, np.bool_})
# other values pandas keeps as they are in an object column (anything else is left to pandas)
_OBJECT_TYPES = _NUMBER_TYPES | _BOOL_TYPES | {str, list, tuple, dict, np.ndarray}
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class FloatLists:
    """A column of float lists: every row's values end to end (``flat``) and where each row starts and
    ends (``offsets``, one more than the rows)."""

    flat: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def rows(self) -> list[np.ndarray]:
        """Each row's values (views into ``flat``)."""
        ends = self.offsets.tolist()
        return [self.flat[start:end] for start, end in zip(ends[:-1], ends[1:], strict=True)]


@dataclass(frozen=True)
class Column:
    """One column: its pandas dtype and its values (a numpy array for ``int64``, ``float64``, ``bool`` and
    ``object``, a list of str or None for ``str``, :class:`FloatLists` for ``list``); ``dtype`` None means
    the values are left to pandas (``values`` then holds them as given)."""

    dtype: Optional[str]
    values: Any

    def __len__(self) -> int:
        return len(self.values)


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _object_array(values: Sequence[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):  # one by one: lists or arrays of equal length would make a matrix
        out[i] = value
    return out


def _int_array(values: Sequence[Any]) -> Optional[np.ndarray]:
    """``values`` (ints) as int64, or None when one is beyond int64 (pandas makes those object or uint64)."""
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:
        return None


def _has_big_int(values: Sequence[Any]) -> bool:
    return any(type(v) is int and not _INT64_MIN <= v <= _INT64_MAX for v in values)


def infer_list(values: Sequence[Any]) -> Column:
    """The column pandas makes of a list of values (``pd.DataFrame({name: values})``, or one key of
    ``pd.DataFrame(rows)`` with missing keys given as NaN)."""
    types = set(map(type, values))
    if not types:
        return Column(FLOAT, np.empty(0, dtype=np.float64))  # pandas: an empty list is float64
    if not types <= _OBJECT_TYPES:
        return Column(None, list(values))
    if types <= _INT_TYPES:
        ints = _int_array(values)
        return Column(INT, ints) if ints is not None else Column(None, list(values))
    if types <= _NUMBER_TYPES and types != {_NONE}:
        if int in types and _has_big_int(values):
            return Column(None, list(values))
        return Column(FLOAT, np.array(values, dtype=np.float64))  # None -> NaN
    if types <= _BOOL_TYPES:
        return Column(BOOL, np.array(values, dtype=bool))
    if str in types and types <= {str, _NONE} | _FLOAT_TYPES:
        if not types & _FLOAT_TYPES:
            return Column(STR, list(values))
        if all(type(v) is str or v is None or _is_nan(v) for v in values):
            return Column(STR, [v if type(v) is str else None for v in values])
    return Column(OBJECT, _object_array(values))


def infer_array(values: np.ndarray) -> Column:
    """The column pandas makes of a 1-D numpy array: its own dtype, an object array of strings (and missing
    values) as ``str``; other dtypes are left to pandas."""
    if values.ndim != 1:
        return Column(None, values)
    if values.dtype == np.int64:
        return Column(INT, values)
    if values.dtype == np.float64:
        return Column(FLOAT, values)
    if values.dtype == np.bool_:
        return Column(BOOL, values)
    if values.dtype != object:
        return Column(None, values)
    items = values.tolist() if values.size else []
    types = set(map(type, items))
    if str in types and types <= {str, _NONE} | _FLOAT_TYPES \
            and all(type(v) is str or v is None or _is_nan(v) for v in items):
        return Column(STR, [v if type(v) is str else None for v in items])
    if not types <= _OBJECT_TYPES or _has_big_int(items):
        return Column(None, values)
    return Column(OBJECT, values)


def infer(values: Any) -> Column:
    """The column of ``values``: a :class:`Column` as it is, :class:`FloatLists`, a numpy array or a list."""
    if isinstance(values, Column):
        return values
    if isinstance(values, FloatLists):
        return Column(LIST, values)
    if isinstance(values, np.ndarray):
        return infer_array(values)
    return infer_list(list(values))


def _repeat(value: Any, n: int) -> Column:
    """The column ``frame.insert(loc, name, value)`` adds to a frame of ``n`` rows."""
    kind = infer_list([value])
    if kind.dtype in (INT, FLOAT, BOOL):
        return Column(kind.dtype, np.full(n, kind.values[0], dtype=kind.values.dtype))
    if kind.dtype == STR:
        return Column(STR, [value] * n)
    if kind.dtype == OBJECT and not isinstance(value, list | tuple | dict | np.ndarray):
        return Column(OBJECT, np.full(n, value, dtype=object))
    return Column(None, None)


def _concat_columns(parts: Sequence[Column]) -> Column:
    """One column of parts that pandas concatenates to the same dtype (int64 with float64: float64)."""
    dtypes = {p.dtype for p in parts}
    if None in dtypes:
        return Column(None, None)
    if dtypes == {INT, FLOAT}:
        return Column(FLOAT, np.concatenate([p.values for p in parts]).astype(np.float64, copy=False))
    if len(dtypes) != 1:
        return Column(None, None)
    dtype = dtypes.pop()
    if dtype == STR:
        return Column(STR, [v for p in parts for v in p.values])
    if dtype == LIST:
        flat = np.concatenate([p.values.flat for p in parts])
        shifts = np.cumsum([0] + [p.values.flat.size for p in parts])
        offsets = np.concatenate([p.values.offsets[:-1] + shift for p, shift in zip(parts, shifts, strict=False)]
                                 + [shifts[-1:]]).astype(np.int64)
        return Column(LIST, FloatLists(flat, offsets))
    return Column(dtype, np.concatenate([p.values for p in parts]))


class Table:
    """Named columns of equal length, each with the dtype pandas would give it; see the module docstring.

    ``frame`` rebuilds the same table as a DataFrame by the pandas calls it stands for (used by
    :meth:`to_pandas`, and to write a table holding a column this module leaves to pandas)."""

    def __init__(self, columns: Mapping[str, Column], n_rows: int, frame: Callable[[], pd.DataFrame]) -> None:
        for name, column in columns.items():
            if column.dtype is not None and len(column) != n_rows:
                raise ValueError(f"column {name!r}: {len(column)} values, expected {n_rows}")
        self.columns: dict[str, Column] = dict(columns)
        self.n_rows = n_rows
        self._frame = frame

    # -- building ---------------------------------------------------------------------------------------

    @classmethod
    def from_columns(cls, data: Mapping[str, Any], frame: Optional[Callable[[], pd.DataFrame]] = None) -> Table:
        """``pd.DataFrame(data)``: one column per key, in order (lists, numpy arrays, :class:`FloatLists` or
        :class:`Column`). ``frame``: how pandas builds the same frame, when ``pd.DataFrame(data)`` is not it
        (for instance when ``data`` holds :class:`FloatLists`)."""
        columns = {str(name): infer(values) for name, values in data.items()}
        lengths = {len(v) for v in data.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns of different lengths: {sorted(lengths)}")
        n_rows = lengths.pop() if lengths else 0
        if frame is None:
            snapshot = dict(data)

            def frame() -> pd.DataFrame:
                import pandas as pd

                return pd.DataFrame(snapshot)

        return cls(columns, n_rows, frame)

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[str, Any]]) -> Table:
        """``pd.DataFrame(rows)``: columns in the order keys first appear, a key a row lacks is NaN there."""
        rows = list(rows)
        names = list(dict.fromkeys(key for row in rows for key in row))

        def frame() -> pd.DataFrame:
            import pandas as pd

            return pd.DataFrame(rows)

        if not all(isinstance(name, str) for name in names):  # pandas keeps such labels: left to it
            return cls({str(name): Column(None, None) for name in names}, len(rows), frame)
        return cls({name: infer_list([row.get(name, math.nan) for row in rows]) for name in names}, len(rows), frame)

    def insert(self, loc: int, name: str, value: Any) -> Table:
        """A new table: this one with ``frame.insert(loc, name, value)`` done (``value``: one scalar)."""
        if name in self.columns:
            raise ValueError(f"cannot insert {name!r}, already exists")
        items = list(self.columns.items())
        items.insert(loc, (name, _repeat(value, self.n_rows)))
        parent = self._frame

        def frame() -> pd.DataFrame:
            out = parent()
            out.insert(loc, name, value)
            return out

        return Table(dict(items), self.n_rows, frame)

    @staticmethod
    def concat(tables: Sequence[Table]) -> Table:
        """``pd.concat(frames, ignore_index=True)`` of tables with the same columns."""
        tables = list(tables)
        if not tables:
            raise ValueError("No objects to concatenate")

        def frame() -> pd.DataFrame:
            import pandas as pd

            return pd.concat([t.to_pandas() for t in tables], ignore_index=True)

        if len(tables) == 1:  # one frame concatenated: the same columns, dtypes and values
            return Table(tables[0].columns, tables[0].n_rows, frame)

        names = list(tables[0].columns)
        if any(list(t.columns) != names for t in tables):  # pandas aligns differing columns: left to it
            columns = {name: Column(None, None) for t in tables for name in t.columns}
        else:
            columns = {name: _concat_columns([t.columns[name] for t in tables]) for name in names}
        return Table(columns, sum(t.n_rows for t in tables), frame)

    # -- reading ----------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.n_rows

    @property
    def names(self) -> list[str]:
        return list(self.columns)

    @property
    def written_by_pandas(self) -> bool:
        """Whether writing this table goes through pandas (a column this module leaves to it, or a pandas
        older than the one whose dtypes this module follows)."""
        return not self.columns or any(c.dtype is None for c in self.columns.values()) or not _pandas_3()

    def to_pandas(self) -> pd.DataFrame:
        """The DataFrame this table stands for (imports pandas)."""
        return self._frame()

    # -- writing ----------------------------------------------------------------------------------------

    def write_parquet(self, path: Path | IO[bytes]) -> None:
        """Write what ``self.to_pandas().to_parquet(path, index=False)`` writes (to a file, or a binary stream)."""
        if self.written_by_pandas:
            self.to_pandas().to_parquet(path, index=False)
            return
        import pyarrow.parquet as pq

        pq.write_table(self._arrow_table(), path, compression=PARQUET_COMPRESSION)

    def to_arrow(self) -> Any:
        """The ``pyarrow.Table`` that ``pyarrow.Table.from_pandas(frame, preserve_index=False)`` makes."""
        if self.written_by_pandas:
            import pyarrow as pa

            return pa.Table.from_pandas(self.to_pandas(), preserve_index=False)
        return self._arrow_table()

    def _arrow_table(self) -> Any:
        import pyarrow as pa
        from pyarrow.pandas_compat import get_logical_type

        arrays = [_arrow_array(column) for column in self.columns.values()]
        described = [{"name": name, "field_name": name, "pandas_type": get_logical_type(array.type),
                      "numpy_type": OBJECT if column.dtype == LIST else column.dtype, "metadata": None}
                     for (name, column), array in zip(self.columns.items(), arrays, strict=True)]
        pandas_metadata = {"index_columns": [], "column_indexes": [], "columns": described, "attributes": {},
                           "creator": {"library": "pyarrow", "version": pa.__version__},
                           "pandas_version": _pandas_version()}
        schema = pa.schema([pa.field(name, array.type) for name, array in zip(self.columns, arrays, strict=True)],
                           metadata={b"pandas": json.dumps(pandas_metadata).encode("utf8")})
        return pa.Table.from_arrays(arrays, schema=schema)

    def write_csv(self, path: Path | IO[str]) -> None:
        """Write what ``self.to_pandas().to_csv(path, index=False)`` writes (to a file, or a text stream)."""
        if self.written_by_pandas or any(c.dtype == LIST for c in self.columns.values()):
            self.to_pandas().to_csv(path, index=False)
            return
        if not isinstance(path, str | Path):
            self._write_csv(path)
            return
        with open(path, "w", encoding="utf-8", newline="") as handle:
            self._write_csv(handle)

    def _write_csv(self, handle: IO[str]) -> None:
        cells = [_csv_cells(column) for column in self.columns.values()]
        writer = csv.writer(handle, lineterminator=os.linesep)
        writer.writerow(self.columns)
        writer.writerows(zip(*cells, strict=True))


@functools.cache  # the installed pandas cannot change while the process runs: looked up once
def _pandas_version() -> str:
    """The installed pandas' version, read from its package metadata (pandas itself is not imported)."""
    from harness.provenance import package_versions

    return package_versions(("pandas",)).get("pandas", "")


def _pandas_3() -> bool:
    """Whether the installed pandas is 3.x or later (the dtypes and file layout this module follows)."""
    major = _pandas_version().split(".", 1)[0]
    return major.isdigit() and int(major) >= 3


def _bitmap(valid: np.ndarray) -> Any:
    """An Arrow validity (or boolean) bitmap of ``valid``."""
    import pyarrow as pa

    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _numbers(arrow_type: Any, values: np.ndarray) -> Any:
    """An Arrow array over the numbers of ``values`` (NaN as null, as ``from_pandas=True`` makes it)."""
    import pyarrow as pa

    values = np.ascontiguousarray(values)
    missing = np.isnan(values) if values.dtype.kind == "f" else None
    n_missing = int(missing.sum()) if missing is not None else 0
    validity = _bitmap(~missing) if n_missing else None
    return pa.Array.from_buffers(arrow_type, len(values), [validity, pa.py_buffer(values)], null_count=n_missing)


def _strings(values: Sequence[Optional[str]]) -> Any:
    """A ``large_string`` Arrow array of ``values`` (None as null)."""
    import pyarrow as pa

    missing = [v is None for v in values]
    n_missing = sum(missing)
    texts = values if not n_missing else ["" if v is None else v for v in values]
    joined = "".join(texts)
    data = joined.encode("utf-8")
    # byte lengths: the characters' count when every character is one byte (ASCII), else each one encoded
    lengths = map(len, texts) if len(data) == len(joined) else (len(t.encode("utf-8")) for t in texts)
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(lengths, dtype=np.int64, count=len(texts)), out=offsets[1:])
    validity = _bitmap(~np.array(missing, dtype=bool)) if n_missing else None
    return pa.Array.from_buffers(pa.large_string(), len(texts), [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=n_missing)


def _arrow_array(column: Column) -> Any:
    """The Arrow array ``pa.array(series, from_pandas=True)`` makes of the column's pandas Series, built from
    buffers: ``pa.array`` imports pandas to look for pandas objects, these do not (only an object column of
    mixed values goes through ``pa.array``)."""
    import pyarrow as pa

    values = column.values
    if column.dtype == INT:
        return _numbers(pa.int64(), values)
    if column.dtype == FLOAT:
        return _numbers(pa.float64(), values)
    if column.dtype == BOOL:
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, _bitmap(values)])
    if column.dtype == STR:  # pandas' str dtype holds its strings in Arrow (large_string)
        return _strings(values)
    if column.dtype == LIST:
        if values.offsets[-1] > np.iinfo(np.int32).max:  # beyond a list array's offsets: as pyarrow splits it
            return pa.array(_object_array(values.rows()), from_pandas=True)
        offsets = values.offsets.astype(np.int32)
        return pa.ListArray.from_arrays(_numbers(pa.int32(), offsets), _numbers(pa.float64(), values.flat))
    if all(v is None for v in values):
        return pa.nulls(len(values))
    return pa.array(values, from_pandas=True)


def _csv_cells(column: Column) -> list[Any]:
    """The column's fields as ``DataFrame.to_csv`` hands them to the ``csv`` module (missing: empty)."""
    values = column.values
    if column.dtype == FLOAT:  # pandas: values.astype(str), NaN as the empty na_rep
        cells = values.astype(str).tolist()
        for i in np.flatnonzero(np.isnan(values)).tolist():
            cells[i] = ""
        return cells
    if column.dtype in (INT, BOOL):
        return values.tolist()
    if column.dtype == STR:
        return ["" if v is None else v for v in values]
    return ["" if v is None or _is_nan(v) else v for v in values]
