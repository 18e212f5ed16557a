"""Mooncake JSONL loader: the shipped traces, and every kind of malformed row."""

from __future__ import annotations

import json
import logging
import math
import time

import pytest

from workloads.config import MooncakeTraceConfig
from workloads.datadir import resolve_trace_path
from workloads.errors import TraceFormatError
from workloads.mooncake_trace import MooncakeTraceWorkload, load_mooncake_trace

CONVERSATION = "mooncake_fast25/conversation_trace.jsonl"
SYNTHETIC = "mooncake_fast25/synthetic_trace.jsonl"


def _row(ts=0, inp=600, out=10, ids=(0, 1), **extra) -> str:
    return json.dumps(
        {"timestamp": ts, "input_length": inp, "output_length": out, "hash_ids": list(ids), **extra}
    )


GOOD = [_row(0), _row(5, 512, 1, (0,)), _row(5, 1025, 3, (0, 1, 2))]


def _write(tmp_path, lines, name="trace.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def conversation():
    workload = MooncakeTraceWorkload(
        MooncakeTraceConfig(name="conv", kind="mooncake_trace", file=CONVERSATION)
    )
    return workload.requests()


@pytest.mark.parametrize(("file", "rows", "reuse"), [(CONVERSATION, 12031, 0.366), (SYNTHETIC, 3993, 0.640)])
def test_shipped_traces_load_with_their_invariants(file, rows, reuse):
    loaded = load_mooncake_trace(resolve_trace_path(file))
    specs = loaded.specs
    assert len(specs) == rows and loaded.stats["n_skipped_rows"] == 0
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(specs, specs[1:], strict=False))
    assert all(len(s.hash_ids) == math.ceil(s.input_length / 512) for s in specs)
    assert min(s.output_length for s in specs) >= 1
    workload = MooncakeTraceWorkload(
        MooncakeTraceConfig(name="t", kind="mooncake_trace", file=file)
    ).requests()
    # SOURCES.md: share of block references that repeat an earlier block.
    assert workload.stats["block_reuse_rate"] == pytest.approx(reuse, abs=0.0006)


def test_conversation_workload_ids_arrivals_and_stats(conversation):
    specs = conversation.specs
    assert [s.request_id for s in specs] == list(range(12031))
    assert specs[0].arrival_s == 0.0 and specs[-1].arrival_s == pytest.approx(3536.999)
    assert (
        specs[0].hash_ids == tuple(range(14))
        and specs[0].input_length == 6758
        and specs[0].output_length == 500
    )
    assert conversation.schedule.mode == "open"
    assert conversation.schedule.offered_rate_rps == pytest.approx(12030 / 3536.999)
    stats = conversation.stats
    assert stats["n_requests"] == 12031 and stats["input_len_mean"] == pytest.approx(12035, abs=1)
    assert stats["output_len_mean"] == pytest.approx(343, abs=1)
    # Mooncake hash ids identify a whole prefix, so leading-prefix hits equal id reuse.
    assert stats["prefix_hit_rate_blocks"] == pytest.approx(stats["block_reuse_rate"])


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


BAD_ROWS = [
    ("{not json", "row", "invalid JSON"),
    ("[1, 2]", "row", "expected a JSON object"),
    ("", "row", "empty line"),
    (json.dumps({"input_length": 600, "output_length": 1, "hash_ids": [0, 1]}), "timestamp", "missing"),
    (_row(ts="7"), "timestamp", "expected a number"),
    (_row(ts=True), "timestamp", "expected a number"),
    (_row(ts=-1), "timestamp", "in [0, 1e+15]"),
    (_row(ts=1), "timestamp", "non-decreasing"),
    (_row(ts=6, inp=True), "input_length", "got bool"),
    (_row(ts=6, inp=0, ids=()), "input_length", "expected an integer in [1, 10000000]"),
    (_row(ts=6, out=2.0), "output_length", "got float"),
    (_row(ts=6, out=0), "output_length", "expected an integer in [1, 10000000]"),
    (json.dumps({"timestamp": 6, "input_length": 600, "output_length": 1}), "hash_ids", "missing"),
    (_row(ts=6, ids=(0, "1")), "hash_ids", "element 1 is str"),
    (_row(ts=6, ids=(0, -1)), "hash_ids", "element 1 is -1"),
    (_row(ts=6, inp=1025, ids=(0, 1)), "hash_ids", "ceil(1025 / 512) = 3"),
]


@pytest.mark.parametrize(("line", "field", "problem"), BAD_ROWS)
def test_strict_mode_names_file_line_field(tmp_path, line, field, problem):
    path = _write(tmp_path, GOOD + [line, _row(9)])
    with pytest.raises(TraceFormatError) as info:
        load_mooncake_trace(path)
    assert str(info.value).startswith(f"{path}:4: {field}: ")
    assert problem in str(info.value)
    assert info.value.line == 4 and info.value.field == field


@pytest.mark.parametrize(("line", "field", "problem"), BAD_ROWS)
def test_lenient_mode_skips_and_counts(tmp_path, line, field, problem):
    path = _write(tmp_path, GOOD + [line, _row(9)])
    loaded = load_mooncake_trace(path, strict=False)
    assert len(loaded.specs) == 4
    assert loaded.stats["n_skipped_rows"] == 1
    [(reason, count)] = loaded.stats["skipped_reasons"].items()
    assert reason.startswith(f"{field}: ") and count == 1


def test_lenient_mode_counts_reasons_and_warns(tmp_path, caplog):
    lines = [_row(0), "oops", _row(10), _row(5), _row(11, inp=3000), "oops2", _row(12)]
    path = _write(tmp_path, lines)
    with caplog.at_level(logging.WARNING, logger="workloads.mooncake_trace"):
        loaded = MooncakeTraceWorkload(
            MooncakeTraceConfig(name="t", kind="mooncake_trace", file=str(path), strict=False)
        ).requests()
    assert loaded.stats["n_skipped_rows"] == 4
    assert loaded.stats["skipped_reasons"] == {
        "row: invalid JSON": 2,
        "timestamp: decreasing": 1,
        "hash_ids: length mismatch": 1,
    }
    assert [s.arrival_s for s in loaded.specs] == [0.0, 0.01, 0.012]
    assert any("skipped 4 of 7 rows" in r.getMessage() for r in caplog.records)


def test_unknown_fields_ignored_float_timestamps_and_block_size(tmp_path):
    path = _write(tmp_path, [_row(0.5, 300, 2, (7, 8, 9), tenant="a"), _row(1.25, 256, 1, (7, 8))])
    specs = load_mooncake_trace(path, block_size=128).specs
    assert [s.arrival_s for s in specs] == [0.0005, 0.00125]
    assert specs[0].hash_ids == (7, 8, 9) and specs[0].block_size == 128
    with pytest.raises(TraceFormatError, match=r":1: hash_ids: .*ceil\(300 / 512\) = 1"):
        load_mooncake_trace(path)


def test_empty_file_is_an_error(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    with pytest.raises(TraceFormatError, match="empty.jsonl:1: row: the file is empty"):
        load_mooncake_trace(path)
