"""The simulator's records as columns (systems.sim.record_columns) equal what the harness extracts from its
records, value for value, and a simulated point is served and written without making its records."""

from __future__ import annotations

import dataclasses
import io
import pickle

import numpy as np
import pytest

from harness.metrics import RecordColumns, extract_columns
from harness.results import columns_frame, records_frame
from systems.sim.record_columns import LazyRecords, record_columns
from systems.sim.simulation import Simulation
from tests.unit.test_sim_scale_end_to_end import _setup, _specs
from vocab.records import RecordFieldColumns

DESIGNS = ["colocated-least_outstanding", "colocated-least_outstanding-tight", "mooncake-conductor",
           "mooncake-conductor-tight", "splitwise-dynamic", "splitwise-dynamic-tight"]


def _same_values(a: object, b: object, where: str) -> None:
    """Equal arrays (dtype, NaN where NaN, the sign of zeros) or equal lists (each value's type and repr)."""
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape, where
        if a.dtype == object:
            assert [(type(x), repr(x)) for x in a.tolist()] == [(type(y), repr(y)) for y in b.tolist()], where
        else:
            assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), where
            assert np.array_equal(np.signbit(a), np.signbit(b)), where
        return
    assert isinstance(a, list) and isinstance(b, list), where
    assert [repr(x) for x in a] == [repr(y) for y in b], where
    assert [float(x) for x in a if x == x] == [float(y) for y in b if y == y], where


def _assert_same_columns(expected: RecordColumns, got: RecordColumns) -> None:
    assert list(got.columns) == list(expected.columns)
    for key in expected.columns:
        _same_values(expected.columns[key], got.columns[key], key)
    assert list(got.extra) == list(expected.extra)
    for key in expected.extra:
        _same_values(expected.extra[key], got.extra[key], f"extra {key}")
    for name in ("itl_ms", "itl_count", "chunk_times_s", "n_chunks"):
        _same_values(getattr(expected, name), getattr(got, name), name)


def _columns(requests, shift_s: float = 0.0) -> RecordColumns:
    """The harness's columns of the simulator's record columns."""
    fields = record_columns(requests, shift_s=shift_s)
    assert isinstance(fields, RecordFieldColumns) and len(fields) == len(requests)
    return extract_columns(fields)


@pytest.fixture(scope="module", params=DESIGNS)
def run(request):
    return Simulation(_setup(request.param)).run(_specs())


def test_columns_equal_the_records_columns(run) -> None:
    _assert_same_columns(extract_columns(run.records()), _columns(run.requests))


def test_the_runs_cover_preemptions_failures_and_requests_without_tokens() -> None:
    tight = Simulation(_setup("colocated-least_outstanding-tight")).run(_specs())
    columns = _columns(tight.requests)
    assert tight.info["preemptions"] > 0
    assert set(columns.columns["status"].tolist()) >= {"ok", "failed"}
    assert (columns.n_chunks == 0).any() and np.isnan(columns.columns["first_token_s"][columns.n_chunks == 0]).all()
    # a request that recorded a first token but kept none (as a request failed after its prefill could)
    tokenless = next(r for r in tight.requests if not r.token_times and not r.ranges)
    tokenless.first_token_s = 1.0
    _assert_same_columns(extract_columns([r.to_record() for r in tight.requests]), _columns(tight.requests))


@pytest.mark.parametrize("shift_s", [0.0, 0.0123])
def test_shifted_columns_equal_the_shifted_records(run, shift_s: float) -> None:
    records = run.records()
    if shift_s:
        records = tuple(dataclasses.replace(r, arrival_s=r.arrival_s - shift_s, sent_s=r.sent_s - shift_s)
                        for r in records)
    _assert_same_columns(extract_columns(records), _columns(run.requests, shift_s=shift_s))


def test_the_requests_table_from_columns_is_the_records_table(run) -> None:
    records = run.records()
    extracted = extract_columns(records)
    frame = columns_frame(_columns(run.requests))
    assert frame is not None
    expected = records_frame(records, extracted.chunk_times_s)
    written = []
    for table in (expected, frame):
        buffer = io.BytesIO()
        table.to_parquet(buffer, index=False)
        written.append(buffer.getvalue())
    assert written[0] == written[1]
    assert list(frame.columns) == list(expected.columns)
    assert frame.drop(columns="chunk_times_s").equals(expected.drop(columns="chunk_times_s"))
    assert [list(x) for x in frame["chunk_times_s"]] == [list(x) for x in expected["chunk_times_s"]]


def test_no_table_from_columns_without_token_times() -> None:
    run = Simulation(_setup("colocated-least_outstanding")).run([])
    assert columns_frame(_columns(run.requests)) is None


def test_lazy_records_are_made_once_and_only_when_read() -> None:
    made = []
    records = tuple(Simulation(_setup("colocated-least_outstanding")).run(_specs(20)).records())

    def make() -> tuple:
        made.append(1)
        return records

    lazy = LazyRecords(len(records), make)
    assert len(lazy) == 20 and not made and "not made yet" in repr(lazy)
    assert lazy[3] == records[3] and list(lazy) == list(records) and lazy == records and lazy[2:5] == records[2:5]
    assert made == [1]
    assert pickle.loads(pickle.dumps(lazy)) == records


def test_lazy_records_check_their_count() -> None:
    lazy = LazyRecords(3, lambda: ())
    with pytest.raises(RuntimeError, match="expected 3 records, made 0"):
        lazy.materialize()


def test_a_simulated_point_is_served_without_making_its_records(tmp_path) -> None:
    from harness.results import RunFolder
    from harness.serve_job import run_serve
    from harness.studies.variants import compose_variant

    cfg = compose_variant(["system=mooncake", "engine.progress=false"])
    served = []
    result = run_serve(cfg, RunFolder(tmp_path), served=served)
    (point,) = served
    assert isinstance(point.result.records, LazyRecords) and "not made yet" in repr(point.result.records)
    assert isinstance(point.result.columns, RecordFieldColumns) and len(point.columns) == len(point.result.columns)
    assert result.metrics["n_issued"] == len(point.result.records) > 0
    import pandas as pd

    frame = pd.read_parquet(tmp_path / "requests.parquet")
    records = point.result.records  # made now, to compare with what was written
    assert frame["request_id"].tolist() == [r.request_id for r in records]
    assert [len(c) for c in frame["chunk_times_s"]] == [r.n_out for r in records]
    assert np.array_equal(frame["finish_s"].to_numpy(), np.array([r.finish_s for r in records]), equal_nan=True)
