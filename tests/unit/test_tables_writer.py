"""harness/tables.py writes what pandas writes: every table it builds gives, byte for byte, the parquet and CSV
files of the DataFrame it stands for, and reads back into the same frame (dtypes, missing values). The
requests table, the points rows and the load samples of a run are checked against the frame-based writers the
harness used before (harness/results.py, harness/serve_job.py, systems/sim/deployment.py), and a fresh
interpreter that builds and writes them never imports pandas."""

from __future__ import annotations

import io
import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.metrics import extract_columns
from harness.records import RequestRecord, RequestStatus
from harness.results import RunFolder, records_frame, records_table
from harness.tables import FloatLists, Table

ROOT = Path(__file__).resolve().parents[2]
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# one value of every kind a table may be handed
SAMPLES = {"none": None, "nan": math.nan, "np nan": np.float64("nan"), "int": 3, "np int": np.int64(-2),
           "float": 1.5, "np float": np.float64(2.25), "zero": 0.0, "minus zero": -0.0, "big float": 1.5e17,
           "small float": 1.5e-7, "inf": math.inf, "bool": True, "np bool": np.bool_(False), "str": "a,b",
           "quoted": 'say "hi"\n', "unicode": "é→", "empty str": "", "list": [1.0, 2.0], "dict": {"k": 1},
           "big int": 2**70, "np int32": np.int32(3), "np float32": np.float32(1.25)}


def parquet_bytes(write) -> bytes:
    buffer = io.BytesIO()
    write(buffer)
    return buffer.getvalue()


def assert_written_as_pandas(table: Table, frame: pd.DataFrame, csv: bool = True) -> None:
    """The table's parquet and CSV are byte for byte the frame's, and read back as the frame."""
    ours = parquet_bytes(table.write_parquet)
    assert ours == parquet_bytes(lambda b: frame.to_parquet(b, index=False))
    pd.testing.assert_frame_equal(pd.read_parquet(io.BytesIO(ours)), pd.read_parquet(
        io.BytesIO(parquet_bytes(lambda b: frame.to_parquet(b, index=False)))))
    if csv:
        out = io.StringIO()
        frame.to_csv(out, index=False)
        text = io.StringIO()
        table.write_csv(text)
        assert text.getvalue() == out.getvalue()


def frame_of(table: Table) -> pd.DataFrame:
    return table.to_pandas()


def parquet_ok(values: list) -> bool:
    """Whether pandas can write the column to parquet at all (mixed kinds cannot)."""
    try:
        pd.DataFrame({"a": values}).to_parquet(io.BytesIO(), index=False)
    except Exception:  # noqa: BLE001 - any pyarrow refusal
        return False
    return True


def check_column(values: list) -> None:
    """One column of ``values``: the dtype pandas infers, its files and its frame."""
    table = Table.from_columns({"a": values})
    frame = pd.DataFrame({"a": values})
    if not table.written_by_pandas:  # the kinds this module writes itself: the dtype pandas infers
        assert table.columns["a"].dtype == str(frame["a"].dtype)
    if parquet_ok(values):
        assert_written_as_pandas(table, frame)
    else:
        with pytest.raises(Exception):  # noqa: B017 - what pandas refuses, so does the table
            table.write_parquet(io.BytesIO())
    pd.testing.assert_frame_equal(table.to_pandas(), frame)


@pytest.mark.parametrize("kinds", [c for r in (1, 2) for c in itertools.combinations(SAMPLES, r)],
                         ids=lambda c: "+".join(c))
def test_a_column_of_one_or_two_kinds_gets_the_dtype_and_files_pandas_gives_it(kinds):
    check_column([SAMPLES[k] for k in kinds] * 2)


@FUZZ
@given(st.lists(st.sampled_from(sorted(SAMPLES)), max_size=7))
def test_a_column_of_any_kinds_gets_the_dtype_and_files_pandas_gives_it(kinds):
    check_column([SAMPLES[k] for k in kinds])


@pytest.mark.parametrize("values", [np.array([1, 2]), np.array([0.5, math.nan]), np.array([True, False]),
                                    np.array(["x", None], dtype=object), np.array([None, None], dtype=object),
                                    np.array([1, None], dtype=object), np.array([1.5, "s"], dtype=object),
                                    np.array([1, 2], dtype=np.int32), np.array(["u", "v"])],
                         ids=lambda a: f"{a.dtype}:{a.tolist()}")
def test_a_numpy_column_gets_the_dtype_and_files_pandas_gives_it(values):
    check_column(values)


def _rows_strategy():
    value = st.one_of(st.none(), st.integers(-(2**40), 2**40), st.floats(allow_nan=True, allow_infinity=True),
                      st.booleans(), st.text(max_size=6))
    row = st.dictionaries(st.sampled_from(["x", "y", "rate_rps", "valid", "name"]), value, max_size=5)
    return st.lists(row, min_size=1, max_size=6)


@FUZZ
@given(_rows_strategy())
def test_rows_are_written_as_pandas_writes_a_frame_of_them(rows):
    table, frame = Table.from_rows(rows), pd.DataFrame(rows)
    if frame.shape[1] == 0:
        return
    for name in frame.columns:
        if not table.written_by_pandas:
            assert table.columns[name].dtype == str(frame[name].dtype)
    if all(parquet_ok(frame[c].tolist()) for c in frame.columns):
        assert_written_as_pandas(table, frame)


@FUZZ
@given(st.lists(_rows_strategy(), min_size=1, max_size=3), st.integers(0, 3))
def test_inserted_and_concatenated_tables_are_what_pandas_makes(parts, point):
    names = sorted({k for rows in parts for row in rows for k in row})
    if not names:
        return
    parts = [[{n: row.get(n) for n in names} for row in rows] for rows in parts]  # the same columns in each part
    tables, frames = [], []
    for i, rows in enumerate(parts):
        tables.append(Table.from_rows(rows).insert(0, "point", point + i).insert(1, "rate", None if i else 1.5))
        frame = pd.DataFrame(rows)
        frame.insert(0, "point", point + i)
        frame.insert(1, "rate", None if i else 1.5)
        frames.append(frame)
    table, frame = Table.concat(tables), pd.concat(frames, ignore_index=True)
    pd.testing.assert_frame_equal(table.to_pandas(), frame)
    if not table.written_by_pandas:
        assert [c.dtype for c in table.columns.values()] == [str(d) for d in frame.dtypes]
    if all(parquet_ok(frame[c].tolist()) for c in frame.columns):
        assert_written_as_pandas(table, frame)


def test_int_and_float_parts_concatenate_to_float_and_other_mixtures_are_left_to_pandas():
    ints, floats = Table.from_columns({"a": [1, 2]}), Table.from_columns({"a": [0.5]})
    both = Table.concat([ints, floats])
    assert both.columns["a"].dtype == "float64" and not both.written_by_pandas
    assert_written_as_pandas(both, pd.concat([pd.DataFrame({"a": [1, 2]}), pd.DataFrame({"a": [0.5]})],
                                             ignore_index=True))
    bools_first = Table.concat([Table.from_columns({"a": [True]}), floats])  # pandas: object (order matters)
    expected = pd.concat([pd.DataFrame({"a": [True]}), pd.DataFrame({"a": [0.5]})], ignore_index=True)
    assert bools_first.written_by_pandas
    pd.testing.assert_frame_equal(bools_first.to_pandas(), expected)
    text, out = io.StringIO(), io.StringIO()
    bools_first.write_csv(text)
    expected.to_csv(out, index=False)
    assert text.getvalue() == out.getvalue() == "a\nTrue\n0.5\n"


def test_zero_rows_and_scalar_inserts():
    empty = Table.from_columns({"a": [], "b": []}).insert(0, "point", 3).insert(1, "rate", None)
    frame = pd.DataFrame({"a": [], "b": []})
    frame.insert(0, "point", 3)
    frame.insert(1, "rate", None)
    pd.testing.assert_frame_equal(empty.to_pandas(), frame)
    assert [c.dtype for c in empty.columns.values()] == [str(d) for d in frame.dtypes]
    assert_written_as_pandas(empty, frame)


def test_float_lists_are_a_list_column():
    lists = FloatLists(np.array([1.0, math.nan, 2.0, 3.0]), np.array([0, 2, 2, 4]))
    table = Table.from_columns({"t": lists}, frame=lambda: pd.DataFrame({"t": [np.array(r) for r in lists.rows()]}))
    assert not table.written_by_pandas
    assert_written_as_pandas(table, table.to_pandas(), csv=False)
    back = pd.read_parquet(io.BytesIO(parquet_bytes(table.write_parquet)))
    assert list(map(len, back["t"])) == [2, 0, 2] and back["t"][2].tolist() == [2.0, 3.0]


def test_a_table_of_differing_lengths_is_refused():
    with pytest.raises(ValueError, match="different lengths"):
        Table.from_columns({"a": [1, 2], "b": [1]})
    with pytest.raises(ValueError, match="No objects"):
        Table.concat([])


# --- the run's tables against the frame-based writers -----------------------------------------------------


def record(i: int, chunks, status=RequestStatus.OK, **kw) -> RequestRecord:
    times = tuple(chunks)
    return RequestRecord(i, status, 0.25 * i, 0.25 * i + 0.001, times[0] if times else math.nan,
                         times[-1] if times else math.nan, 10 + i, 8, len(times), times, **kw)


RECORD_CASES = {
    "simulated": [record(i, [0.25 * i + 0.1 + 0.02 * j for j in range(i % 5 + 1)], instance=f"C{i % 3}",
                         extra={"queue_s": 0.01 * i, "prefill_s": 0.1, "preemptions": 0.0}) for i in range(12)],
    "failed and rejected": [record(0, [0.1, 0.2], extra={"a": 1.0}),
                            record(1, [], RequestStatus.FAILED, error="HTTP 500: boom, \"quoted\"", extra={"a": 2.0}),
                            record(2, [], RequestStatus.REJECTED, error="early rejection", extra={"a": math.nan}),
                            record(3, [], RequestStatus.UNFINISHED, extra={})],
    "None values": [record(0, [0.5], instance=None, error=None, extra={"b": None}),  # type: ignore[arg-type]
                    record(1, [0.75], instance="P0->D1", error="", extra={"b": 1.5})],
    "no instance at all": [record(i, [0.1 * i + 0.1], instance=None) for i in range(3)],  # type: ignore[arg-type]
    "integer and mixed times": [record(0, [1, 2], extra={"k": 1}), record(1, [3.0, 4], extra={"k": 2})],
    "no chunk times": [record(0, [], RequestStatus.FAILED), record(1, [], RequestStatus.FAILED)],
    "strings in extra": [record(0, [0.1], extra={"engine": "vllm", "z": 1.0}),
                         record(1, [0.2], extra={"engine": "sglang", "y": 2})],
    "non-finite extras": [record(i, [0.1 * i + 0.1], extra={"d": [math.nan, 0.5, math.inf, 0.5, -math.inf, 0.5][i],
                                                             "z": [0.0, -0.0, math.nan, 1.0, 1.0, 1.0][i],
                                                             "all_nan": math.nan}) for i in range(6)],
    "none": [],
}


@pytest.mark.parametrize("case", sorted(RECORD_CASES))
def test_the_extra_column_is_json_dumps_of_each_records_extra(case):
    records = RECORD_CASES[case]
    expected = [json.dumps(r.extra, sort_keys=True) for r in records]
    for extra in (None, extract_columns(records).extra):  # gathered here, or by the caller
        assert records_frame(records)["extra"].tolist() == expected
        assert list(records_table(records, None, extra).columns["extra"].values) == expected


def old_point_frame(index, rate, records):
    """serve_job's point rows as they were built: records_frame, then two inserted columns."""
    frame = records_frame(records)
    frame.insert(0, "point", index)
    frame.insert(1, "rate_rps", rate)
    return frame


@pytest.mark.parametrize("case", sorted(RECORD_CASES))
@pytest.mark.parametrize("rates", [[None], [1.0, 2.5]], ids=["one point", "two points"])
def test_requests_parquet_is_what_the_frame_based_writer_wrote(case, rates, tmp_path):
    records = RECORD_CASES[case]
    columns = extract_columns(records)
    tables = [records_table(records, columns.chunk_times_s, columns.extra).insert(0, "point", i)
              .insert(1, "rate_rps", rate) for i, rate in enumerate(rates)]
    old = pd.concat([old_point_frame(i, rate, records) for i, rate in enumerate(rates)], ignore_index=True)
    new = Table.concat(tables)
    folder = RunFolder(tmp_path)
    ours = folder.write_table("requests.parquet", new).read_bytes()
    assert ours == parquet_bytes(lambda b: old.to_parquet(b, index=False))
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "requests.parquet"),
                                  pd.read_parquet(io.BytesIO(parquet_bytes(lambda b: old.to_parquet(b, index=False)))))
    pd.testing.assert_frame_equal(new.to_pandas(), old)


def test_records_table_without_gathered_columns_is_the_same():
    records = RECORD_CASES["simulated"]
    columns = extract_columns(records)
    with_columns = parquet_bytes(records_table(records, columns.chunk_times_s, columns.extra).write_parquet)
    assert parquet_bytes(records_table(records).write_parquet) == with_columns
    assert with_columns == parquet_bytes(lambda b: records_frame(records).to_parquet(b, index=False))


def points_rows():
    base = {"point": 0, "rate_rps": None, "offered_rate_rps": 1.8418848094584657, "n_prompt_capped": 0,
            "engine_events": 711, "engine_simulated_s": 69.95814675743337, "engine_kv_transfer_bytes": 19327352832.0,
            "mean_ttft_ms": 120.5, "p99_tpot_ms": None, "slo_name": "none", "slo_attainment": 1.0,
            "meets_attainment_target": True, "cache_hit_fraction": None,
            "percentile_method": "numpy.percentile(method='linear'), i.e. Hyndman & Fan type 7",
            "valid": False, "validity_reasons": "p99 issue lag 12.000 ms exceeds 10 ms: the load, \"generator\""}
    second = {**base, "point": 1, "rate_rps": 2.0, "p99_tpot_ms": 31.25, "cache_hit_fraction": 0.5, "valid": True,
              "validity_reasons": "", "capacity_rps": 4.0}
    return [base, second]


@pytest.mark.parametrize("n", [1, 2])
def test_points_csv_is_what_pandas_wrote(n, tmp_path):
    rows = points_rows()[:n]
    path = RunFolder(tmp_path).write_table("points.csv", Table.from_rows(rows))
    expected = io.StringIO()
    pd.DataFrame(rows).to_csv(expected, index=False)
    assert path.read_text(encoding="utf-8") == expected.getvalue()


def test_load_csv_is_what_the_per_point_frames_wrote(tmp_path):
    samples = [[{"time_s": t, "instance": f"P{k}", "role": "prefill" if k else "decode", "running": k,
                 "waiting": 0, "queued_prefill_s": 0 if t == 0 else 0.1 * t, "kv_utilization": 0.25,
                 "step_s": math.nan if k else 0.003} for t in (0.0, 10.0) for k in (0, 1)] for _ in range(2)]
    frames = []
    for point, rows in enumerate(samples):
        frame = pd.DataFrame(rows)
        frame.insert(0, "point", point)
        frames.append(frame)
    expected = io.StringIO()
    pd.concat(frames, ignore_index=True).to_csv(expected, index=False)
    path = RunFolder(tmp_path).write_point_rows("load.csv", list(enumerate(samples)))  # the simulator's way
    assert path.read_text(encoding="utf-8") == expected.getvalue()
    assert "0,0.0,P0,decode,0,0,0.0,0.25,0.003" in expected.getvalue()  # an int 0 among floats: 0.0


def test_building_and_writing_the_tables_imports_no_pandas(tmp_path):
    code = f"""
import json, math, sys
from harness.metrics import extract_columns, summarize
from harness.records import RequestRecord, RequestStatus
from harness.results import RunFolder, records_table
from harness.slo import SLOConfig
from harness.tables import Table
from harness.validity import ValidityConfig, assess_validity
import harness.app, harness.engines, harness.serve_job, systems.sim.deployment, systems.contract
records = [RequestRecord(i, RequestStatus.OK, 0.1 * i, 0.1 * i, 0.1 * i + 0.05, 0.1 * i + 0.2, 10, 4, 3,
                         (0.1 * i + 0.05, 0.1 * i + 0.1, 0.1 * i + 0.2), instance="C0", extra={{"q": 0.5}})
           for i in range(20)]
columns = extract_columns(records)
metrics = summarize(columns, SLOConfig(ttft_ms=100.0))
validity = assess_validity(records, metrics, ValidityConfig(), columns=columns)
folder = RunFolder({str(tmp_path)!r})
table = records_table(records, columns.chunk_times_s, columns.extra).insert(0, "point", 0).insert(1, "rate_rps", None)
folder.write_table("requests.parquet", Table.concat([table]))
folder.write_table("points.csv", Table.from_rows([{{**metrics, "valid": validity["valid"]}}]))
folder.write_point_rows("load.csv", [(0, [{{"time_s": 0.0, "instance": "C0", "step_s": math.nan}}])])
print(json.dumps("pandas" in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) is False
    back = pd.read_parquet(tmp_path / "requests.parquet")
    assert len(back) == 20 and str(back["status"].dtype) == "str" and back["rate_rps"].isna().all()
    assert pd.read_csv(tmp_path / "points.csv")["n_ok"].tolist() == [20]


@pytest.mark.parametrize("case", ["simulated", "None values", "failed and rejected"])
def test_the_arrow_table_is_the_one_pyarrow_makes_of_the_frame(case):
    import pyarrow as pa

    records = RECORD_CASES[case]
    ours = records_table(records).insert(0, "point", 0).insert(1, "rate_rps", None).to_arrow()
    frame = records_frame(records)
    frame.insert(0, "point", 0)
    frame.insert(1, "rate_rps", None)
    theirs = pa.Table.from_pandas(frame, preserve_index=False)
    assert ours.schema.equals(theirs.schema, check_metadata=True)
    assert ours.equals(theirs)
