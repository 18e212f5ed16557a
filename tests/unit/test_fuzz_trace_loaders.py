"""Property-based tests of the trace loaders (Mooncake JSONL, Azure CSV, ShareGPT lengths CSV).

Any bytes written as a trace file give either requests that are all valid or a :class:`WorkloadError`
whose message names the file and a line; never another exception type. Rows of plausible but wrong
values (negative, NaN, huge, missing fields, wrong types, decreasing timestamps) are checked against an
independent oracle: a strict load returns exactly the rows written when every row is valid, and otherwise
fails at the first bad row, naming its line and field; nothing partial that looks valid.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
import re
import tempfile
from pathlib import Path
from typing import Any, Optional

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workloads import build_workload
from workloads.azure_trace import HEADER, TICKS_PER_SECOND, load_azure_trace
from workloads.base import LoadedRequests, WorkloadRequests
from workloads.config import MAX_REQUEST_TOKENS
from workloads.errors import TraceFormatError, WorkloadError
from workloads.mooncake_trace import MAX_TIMESTAMP_MS, load_mooncake_trace
from workloads.sharegpt_lengths import OUTPUT_COLUMN, PROMPT_COLUMN, load_sharegpt_lengths

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BLOCK = 4  # small hash blocks so that valid rows stay small


def _write(data: bytes, name: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix="fuzz_trace_")) / name
    path.write_bytes(data)
    return path


def _assert_user_error_names_file(exc: WorkloadError, path: Path) -> None:
    msg = str(exc)
    assert msg.startswith(f"{path}:"), msg
    assert re.match(rf"{re.escape(str(path))}:(\d+): \S", msg), msg
    if isinstance(exc, TraceFormatError):
        assert exc.line >= 1 and exc.field


def _assert_valid(loaded: LoadedRequests, block_size: int, timed: bool) -> None:
    assert loaded.specs, "a load without an error has requests"
    previous = 0.0
    for spec in loaded.specs:
        assert 1 <= spec.input_length <= MAX_REQUEST_TOKENS and 1 <= spec.output_length <= MAX_REQUEST_TOKENS
        assert len(spec.hash_ids) == -(-spec.input_length // block_size)
        assert all(type(h) is int and 0 <= h < 2**63 for h in spec.hash_ids)
        if timed:
            assert math.isfinite(spec.arrival_s) and spec.arrival_s >= previous
            previous = spec.arrival_s


# -- any bytes ---------------------------------------------------------------------------------------------

JSONISH = st.lists(st.sampled_from([b"{", b"}", b"[", b"]", b'"timestamp": ', b'"input_length": ', b'"output_length": ',
                                    b'"hash_ids": ', b"0", b"1", b"-1", b"1e400", b"NaN", b"9" * 30, b", ", b"\n",
                                    b"\xef\xbb\xbf", b"\xff", b"true", b"null", b'"x"', b"\r\n", b"\x00"]),
                   max_size=40).map(b"".join)
NUMBER_TEXT = st.sampled_from([b"0", b"1", b"-1", b"1.5", b"-0.0", b"1e400", b"-1e400", b"NaN", b"Infinity", b"1e15",
                               b"1e16", b"9" * 400, b"9" * 4400, b"true", b"null", b'"7"', b"[1]", b"{}", b"[" * 3000])
JSON_ROW = st.tuples(NUMBER_TEXT, NUMBER_TEXT, NUMBER_TEXT, st.lists(NUMBER_TEXT, max_size=3)).map(
    lambda t: b'{"timestamp": %s, "input_length": %s, "output_length": %s, "hash_ids": [%s]}' % (
        t[0], t[1], t[2], b", ".join(t[3])))
ANY_BYTES = st.one_of(st.binary(max_size=300), JSONISH, st.lists(JSON_ROW, min_size=1, max_size=4).map(b"\n".join))


@FUZZ
@given(data=ANY_BYTES, strict=st.booleans())
def test_mooncake_any_bytes_load_or_name_the_line(data: bytes, strict: bool) -> None:
    path = _write(data, "trace.jsonl")
    try:
        loaded = load_mooncake_trace(path, block_size=BLOCK, strict=strict)
    except WorkloadError as exc:
        _assert_user_error_names_file(exc, path)
        return
    if strict or loaded.specs:  # strict: all rows valid; lenient: bad rows skipped and counted, the rest valid
        _assert_valid(loaded, BLOCK, timed=True)
    else:
        assert loaded.stats["n_skipped_rows"] == loaded.stats["n_rows"] >= 1


@FUZZ
@given(data=ANY_BYTES)
def test_mooncake_any_bytes_through_the_workload(data: bytes) -> None:
    path = _write(data, "trace.jsonl")
    cfg = {"name": "fuzz", "kind": "mooncake_trace", "file": path.name, "block_size": BLOCK, "strict": False}
    try:
        requests = build_workload(cfg, data_dir=str(path.parent)).requests()
    except WorkloadError as exc:
        assert str(path) in str(exc) or "no requests" in str(exc), str(exc)
        return
    assert isinstance(requests, WorkloadRequests) and len(requests) >= 1
    assert [s.request_id for s in requests.specs] == list(range(len(requests)))


AZURE_BYTES = st.one_of(st.binary(max_size=300), st.lists(st.sampled_from(
    [HEADER.encode(), b"\n", b"\r\n", b",", b"2023-11-16 18:17:03.9799600", b"2023-02-30 00:00:00", b"12", b"0", b"-3",
     b"9" * 5000, b"\xef\xbb\xbf", b"\xff", "\u0663".encode(), b" ", b"\x00"]), max_size=30).map(b"".join))


@FUZZ
@given(data=AZURE_BYTES)
def test_azure_any_bytes_load_or_name_the_line(data: bytes) -> None:
    path = _write(data, "trace.csv")
    try:
        loaded = load_azure_trace(path, block_size=BLOCK)
    except WorkloadError as exc:
        _assert_user_error_names_file(exc, path)
        return
    _assert_valid(loaded, BLOCK, timed=True)


SHAREGPT_BYTES = st.one_of(st.binary(max_size=300), st.lists(st.sampled_from(
    [f"{PROMPT_COLUMN},{OUTPUT_COLUMN}".encode(), b"\n", b"\r\n", b",", b'"', b"12", b"0", b"-3", b"1" * 200_000,
     b"\xef\xbb\xbf", b"\xff", b" ", b"\x00", "\u0663".encode()]), max_size=30).map(b"".join))


@FUZZ
@given(data=SHAREGPT_BYTES)
def test_sharegpt_any_bytes_load_or_name_the_line(data: bytes) -> None:
    path = _write(data, "lengths.csv")
    try:
        loaded = load_sharegpt_lengths(path, block_size=BLOCK, max_total_tokens=None, min_tokens=0, sample_seed=None)
    except WorkloadError as exc:
        _assert_user_error_names_file(exc, path)
        return
    _assert_valid(loaded, BLOCK, timed=False)


# -- plausible rows with wrong values, against an oracle -----------------------------------------------------

WRONG = st.one_of(st.none(), st.booleans(), st.text(max_size=5), st.floats(allow_nan=True, allow_infinity=True),
                  st.integers(min_value=-(10**30), max_value=10**30), st.lists(st.integers(0, 3), max_size=2),
                  st.dictionaries(st.text(max_size=2), st.integers(), max_size=1))
MISSING = object()


def _field(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(valid, valid, valid, WRONG, st.just(MISSING))


@st.composite
def mooncake_row(draw: Any) -> Any:
    if draw(st.integers(0, 15)) == 0:  # a line that is no JSON object at all
        return draw(st.sampled_from(["", "   ", "{", "[1, 2]", "null", "[" * 5000, '{"timestamp": 1', "1" * 5000]))
    ts = draw(_field(st.one_of(st.integers(0, 10**6), st.floats(0, 1e6), st.just(MAX_TIMESTAMP_MS * 10))))
    inp = draw(_field(st.integers(1, 40)))
    out = draw(_field(st.one_of(st.integers(1, 40), st.just(MAX_REQUEST_TOKENS + 1))))
    if type(inp) is int and 1 <= inp <= 40 and draw(st.booleans()):
        ids: Any = draw(st.lists(st.integers(0, 2**63 - 1), min_size=-(-inp // BLOCK), max_size=-(-inp // BLOCK)))
    else:
        ids = draw(_field(st.lists(st.one_of(st.integers(-2, 2**64), st.booleans(), st.text(max_size=1)), max_size=12)))
    row = {k: v for k, v in (("timestamp", ts), ("input_length", inp), ("output_length", out), ("hash_ids", ids))
           if v is not MISSING}
    return row


def _int_ok(value: Any) -> bool:
    return type(value) is int and 1 <= value <= MAX_REQUEST_TOKENS


def mooncake_oracle(row: Any, previous: Optional[float]) -> Optional[tuple[str, float]]:
    """``None`` when the row is valid, else the field the loader must name (and the timestamp to keep)."""
    if not isinstance(row, dict):
        return ("row", 0.0)
    ts = row.get("timestamp", MISSING)
    if type(ts) not in (int, float) or (type(ts) is float and not math.isfinite(ts)) or not 0 <= ts <= MAX_TIMESTAMP_MS:
        return ("timestamp", 0.0)
    if previous is not None and ts < previous:
        return ("timestamp", 0.0)
    for name in ("input_length", "output_length"):
        if not _int_ok(row.get(name, MISSING)):
            return (name, 0.0)
    ids = row.get("hash_ids", MISSING)
    if type(ids) is not list or not all(type(h) is int and 0 <= h < 2**63 for h in ids):
        return ("hash_ids", 0.0)
    if len(ids) != -(-row["input_length"] // BLOCK):
        return ("hash_ids", 0.0)
    return None


def _mooncake_line(row: Any) -> str:
    return row if isinstance(row, str) else json.dumps(row)


@FUZZ
@given(rows=st.lists(mooncake_row(), min_size=1, max_size=8), bom=st.booleans())
def test_mooncake_rows_strict_is_all_or_the_first_bad_line(rows: list[Any], bom: bool) -> None:
    text = ("\ufeff" if bom else "") + "\n".join(_mooncake_line(r) for r in rows) + "\n"
    path = _write(text.encode(), "trace.jsonl")
    previous: Optional[float] = None
    first_bad: Optional[tuple[int, str]] = None
    for i, row in enumerate(rows, start=1):
        problem = mooncake_oracle(row, previous)
        if problem is not None:
            first_bad = (i, problem[0])
            break
        previous = row["timestamp"]
    try:
        loaded = load_mooncake_trace(path, block_size=BLOCK, strict=True)
    except TraceFormatError as exc:
        assert first_bad is not None, f"valid rows refused: {exc}"
        assert (exc.line, exc.field) == first_bad, str(exc)
        assert str(exc).startswith(f"{path}:{exc.line}: {exc.field}: ")
        return
    assert first_bad is None, f"row {first_bad} accepted: {rows}"
    assert [(s.arrival_s, s.input_length, s.output_length, list(s.hash_ids)) for s in loaded.specs] == [
        (r["timestamp"] / 1000.0, r["input_length"], r["output_length"], r["hash_ids"]) for r in rows]


@FUZZ
@given(rows=st.lists(mooncake_row(), min_size=1, max_size=8))
def test_mooncake_rows_lenient_keeps_exactly_the_valid_rows(rows: list[Any]) -> None:
    path = _write("\n".join(_mooncake_line(r) for r in rows).encode() + b"\n", "trace.jsonl")
    kept, previous = [], None
    for row in rows:
        if mooncake_oracle(row, previous) is None:
            kept.append(row)
            previous = row["timestamp"]
    loaded = load_mooncake_trace(path, block_size=BLOCK, strict=False)
    assert [(s.input_length, s.output_length, list(s.hash_ids)) for s in loaded.specs] == [
        (r["input_length"], r["output_length"], r["hash_ids"]) for r in kept]
    assert loaded.stats["n_skipped_rows"] == len(rows) - len(kept)
    assert loaded.stats["n_rows"] == len(rows)


DATES = st.datetimes(min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2030, 12, 31))
JUNK = st.text(alphabet=st.characters(blacklist_characters=",\n\r", blacklist_categories=("Cs",)), max_size=8)


@st.composite
def azure_row(draw: Any) -> tuple[str, Optional[int], str, str]:
    """``(timestamp text, its ticks or None when invalid, context text, generated text)``."""
    if draw(st.integers(0, 4)):
        when = draw(DATES)
        digits = draw(st.integers(0, 7))
        frac = f"{when.microsecond:06d}0"[:digits]
        text = when.strftime("%Y-%m-%d %H:%M:%S") + (f".{frac}" if draw(st.booleans()) else "")
        if "." not in text:
            frac = ""
        ticks = ((when.replace(microsecond=0) - dt.datetime(1, 1, 1)) // dt.timedelta(seconds=1)) * TICKS_PER_SECOND
        ticks += int(frac.ljust(7, "0")) if frac else 0
        ts_text, ts_ticks = text, ticks
    else:
        ts_text = draw(st.one_of(JUNK, st.sampled_from(["2023-02-30 00:00:00", "2023-11-16 24:00:00",
                                                         "2023-11-16 18:17:03.12345678", "\u0662023-11-16 18:17:03"])))
        ts_ticks = None
    counts = st.one_of(st.integers(1, 40).map(str), st.integers(1, 40).map(str), JUNK,
                       st.sampled_from(["0", "-3", "1.5", str(MAX_REQUEST_TOKENS + 1), "9" * 5000, "\u0663", " 5"]))
    return ts_text, ts_ticks, draw(counts), draw(counts)


def _azure_count(text: str) -> Optional[int]:
    if re.fullmatch(r"[0-9]{1,9}", text) and 1 <= int(text) <= MAX_REQUEST_TOKENS:
        return int(text)
    return None


@FUZZ
@given(rows=st.lists(azure_row(), min_size=1, max_size=8), crlf=st.booleans(), bom=st.booleans())
def test_azure_rows_are_all_or_the_first_bad_line(rows: list[tuple[str, Optional[int], str, str]], crlf: bool,
                                                  bom: bool) -> None:
    eol = "\r\n" if crlf else "\n"
    text = eol.join([HEADER, *(f"{t},{c},{g}" for t, _, c, g in rows)]) + eol
    path = _write(("\ufeff" if bom else "").encode() + text.encode(), "trace.csv")
    first_bad, previous, expected = None, None, []
    for line, (_, ticks, ctx, gen) in enumerate(rows, start=2):
        if ticks is None or (previous is not None and ticks < previous):
            first_bad = (line, "TIMESTAMP")
        elif _azure_count(ctx) is None:
            first_bad = (line, "ContextTokens")
        elif _azure_count(gen) is None:
            first_bad = (line, "GeneratedTokens")
        if first_bad:
            break
        previous = ticks
        expected.append((ticks, _azure_count(ctx), _azure_count(gen)))
    try:
        loaded = load_azure_trace(path, block_size=BLOCK)
    except TraceFormatError as exc:
        assert first_bad is not None, f"valid rows refused: {exc}"
        assert (exc.line, exc.field) == first_bad, str(exc)
        return
    assert first_bad is None, f"row {first_bad} accepted: {rows}"
    first = expected[0][0]
    assert [(s.arrival_s, s.input_length, s.output_length) for s in loaded.specs] == [
        ((t - first) / TICKS_PER_SECOND, c, g) for t, c, g in expected]


SG_FIELD = st.one_of(st.integers(1, 40).map(str), st.integers(1, 40).map(lambda n: f" {n} "),
                     st.text(max_size=6), st.sampled_from(["0", "-3", "1.5", "1e3", "+5", "1_0", str(MAX_REQUEST_TOKENS + 1),
                                                           "\u0663", "5\x00", "7\n8"]))


def _sg_count(text: str) -> Optional[int]:
    stripped = text.strip()
    if re.fullmatch(r"[0-9]{1,9}", stripped) and 1 <= int(stripped) <= MAX_REQUEST_TOKENS:
        return int(stripped)
    return None


@FUZZ
@given(rows=st.lists(st.lists(SG_FIELD, min_size=1, max_size=3), min_size=1, max_size=8))
def test_sharegpt_rows_are_all_or_a_clear_error(rows: list[list[str]]) -> None:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([PROMPT_COLUMN, OUTPUT_COLUMN])
    writer.writerows(rows)
    path = _write(buf.getvalue().encode(), "lengths.csv")
    bad = any(len(r) < 2 or _sg_count(r[0]) is None or _sg_count(r[1]) is None for r in rows)
    try:
        loaded = load_sharegpt_lengths(path, block_size=BLOCK, max_total_tokens=None, min_tokens=0, sample_seed=None)
    except TraceFormatError as exc:
        assert bad, f"valid rows refused: {exc}"
        assert str(exc).startswith(f"{path}:{exc.line}: ") and exc.line >= 2
        return
    assert not bad, f"a bad row was accepted: {rows}"
    assert [(s.input_length, s.output_length) for s in loaded.specs] == [(_sg_count(r[0]), _sg_count(r[1]))
                                                                         for r in rows]
