"""A small table read from a CSV file and written back, typed and formatted as pandas would, without pandas.

A single run's figure (:mod:`figures.serving`) plots a few columns of the job's ``points.csv`` (one row per
measured point) and writes them beside the PNG. Reading and writing that through pandas made a run import
pandas (a quarter to a third of a second) for a table of a few rows. :func:`read_csv_table` gives each column
the type ``pandas.read_csv`` infers with its defaults, and :meth:`CsvTable.write_csv` writes the table as
``DataFrame.to_csv(path, index=False)`` does, to the byte (``tests/unit/test_figures_csv_table.py`` compares
the two):

- a column of integers is ``int`` (within 64 bits, signed or unsigned); with a missing value it is ``float``;
- a column of numbers (``1.5``, ``1e5``, ``.5``, ``inf``, ``-Infinity``, spaces around them) is ``float``,
  written as Python's ``repr`` (``100000.0``, ``-inf``);
- a column of ``True``/``TRUE``/``true``/``False``/``FALSE``/``false`` is ``bool`` (missing values stay
  missing, as in pandas' object column);
- anything else is ``text``, kept verbatim;
- pandas' default missing-value markers (``""``, ``NA``, ``nan``, ``None``, ...) are missing (``NaN``),
  written as an empty field; a row shorter than the header is filled with missing values; blank lines are
  skipped; a repeated column name is renamed ``name.1`` and an empty one ``Unnamed: <i>``, as pandas does.

A row with more fields than the header, or a file without a header line, is an error naming the file and
line (pandas would take the first column as the index, or raise). It is for the small tables the suite writes
itself; it does not take pandas' options (separators, encodings other than UTF-8, dates)."""

from __future__ import annotations

import csv
import math
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Union

Kind = Literal["int", "float", "bool", "text"]
Value = Union[int, float, bool, str]

# pandas' default missing-value markers (pandas._libs.parsers.STR_NA_VALUES)
NA_STRINGS = frozenset({"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
                        "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"})
TRUE_STRINGS = frozenset({"True", "TRUE", "true"})
FALSE_STRINGS = frozenset({"False", "FALSE", "false"})
_INT = re.compile(r"[ \t]*[+-]?\d+[ \t]*")
_FLOAT = re.compile(r"[ \t]*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|(?i:inf|infinity))[ \t]*")
_INT64 = (-(2**63), 2**63 - 1)
_UINT64 = (0, 2**64 - 1)


def is_missing(value: Value) -> bool:
    """Whether a cell is missing (``NaN``, as pandas has it in every kind of column)."""
    return isinstance(value, float) and math.isnan(value)


@dataclass(frozen=True)
class CsvTable:
    """Columns by name (in file order), each a list of ``int``/``float``/``bool``/``str`` cells with ``NaN``
    for a missing one, and each column's kind."""

    columns: dict[str, list[Value]]
    kinds: dict[str, Kind]

    @property
    def n_rows(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    @property
    def empty(self) -> bool:
        """No rows or no columns (``DataFrame.empty``)."""
        return self.n_rows == 0

    def __contains__(self, name: object) -> bool:
        return name in self.columns

    def __getitem__(self, name: str) -> list[Value]:
        try:
            return self.columns[name]
        except KeyError:
            raise KeyError(f"no column {name!r}; the table has {list(self.columns)}") from None

    def has_values(self, name: str) -> bool:
        """Whether column ``name`` exists and has a cell that is not missing (``notna().any()``)."""
        return name in self.columns and not all(is_missing(v) for v in self.columns[name])

    def select(self, names: Iterable[str]) -> CsvTable:
        """The named columns, in that order."""
        names = list(names)
        return CsvTable({n: self[n] for n in names}, {n: self.kinds[n] for n in names})

    def rows_where(self, keep: Sequence[bool]) -> CsvTable:
        """The rows where ``keep`` is true."""
        return CsvTable({n: [v for v, k in zip(col, keep, strict=True) if k] for n, col in self.columns.items()},
                        dict(self.kinds))

    def write_csv(self, path: Path) -> None:
        """Write the table as ``DataFrame.to_csv(path, index=False)`` would."""
        names = list(self.columns)
        cells = [[_format(self.kinds[n], v) for v in self.columns[n]] for n in names]
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f, lineterminator=os.linesep)
            writer.writerow(names)
            writer.writerows(zip(*cells, strict=True))


def _format(kind: Kind, value: Value) -> str:
    if is_missing(value):
        return ""
    if kind == "float":
        return repr(float(value))
    return str(value)


def _mangle(names: list[str]) -> list[str]:
    """pandas' names for a header: ``Unnamed: <i>`` for an empty one, ``name.<n>`` for a repeated one."""
    names = [name if name else f"Unnamed: {i}" for i, name in enumerate(names)]
    counts: defaultdict[str, int] = defaultdict(int)
    for i, name in enumerate(names):
        count = counts[name]
        while count > 0:
            counts[name] = count + 1
            name = f"{name}.{count}"
            count = counts[name]
        names[i] = name
        counts[name] = count + 1
    return names


def _typed(raw: list[str]) -> tuple[Kind, list[Value]]:
    """The kind pandas infers for a column of raw cells, and the cells as values of that kind."""
    present = [s for s in raw if s not in NA_STRINGS]
    missing = len(present) < len(raw)
    if not present:
        return "float", [math.nan] * len(raw)
    if all(s in TRUE_STRINGS or s in FALSE_STRINGS for s in present):
        return "bool", [math.nan if s in NA_STRINGS else s in TRUE_STRINGS for s in raw]
    if all(_INT.fullmatch(s) for s in present):
        ints = [int(s) for s in present]
        lo, hi = min(ints), max(ints)
        if _INT64[0] <= lo and hi <= _INT64[1] or _UINT64[0] <= lo and hi <= _UINT64[1]:
            if missing:
                return "float", [math.nan if s in NA_STRINGS else float(int(s)) for s in raw]
            return "int", ints
        return "text", [math.nan if s in NA_STRINGS else s for s in raw]
    if all(_FLOAT.fullmatch(s) for s in present):
        return "float", [math.nan if s in NA_STRINGS else float(s) for s in raw]
    return "text", [math.nan if s in NA_STRINGS else s for s in raw]


def read_csv_table(path: Path) -> CsvTable:
    """Read ``path`` (a header line, then rows) as ``pandas.read_csv(path)`` types it (module docstring)."""
    path = Path(path)
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        header = next((row for row in reader if row), None)
        if header is None:
            raise ValueError(f"{path}: empty file; expected a header line naming the columns")
        rows: list[list[str]] = []
        for row in reader:
            if not row:
                continue  # a blank line
            if len(row) > len(header):
                raise ValueError(f"{path}, line {reader.line_num}: {len(row)} fields; the header names "
                                 f"{len(header)} columns")
            rows.append(row + [""] * (len(header) - len(row)))
    columns: dict[str, list[Value]] = {}
    kinds: dict[str, Kind] = {}
    for i, name in enumerate(_mangle(header)):
        kinds[name], columns[name] = _typed([row[i] for row in rows])
    return CsvTable(columns, kinds)
