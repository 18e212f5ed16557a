"""Run folders: records round-trip through parquet, writes are atomic, summaries are JSON-safe."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from harness.results import RunFolder, load_records, read_summary, records_frame
from vocab.records import RequestRecord, RequestStatus, RunSummary


def make_record(i: int, status: RequestStatus = RequestStatus.OK) -> RequestRecord:
    return RequestRecord(
        request_id=i, status=status, arrival_s=0.5 * i, sent_s=0.5 * i + 0.001,
        first_token_s=0.5 * i + 0.1 if status == RequestStatus.OK else math.nan,
        finish_s=0.5 * i + 0.3 if status == RequestStatus.OK else math.nan,
        input_length=100 + i, output_length=8, n_out=3 if status == RequestStatus.OK else 0,
        chunk_times_s=(0.5 * i + 0.1, 0.5 * i + 0.2, 0.5 * i + 0.3) if status == RequestStatus.OK else (),
        cached_tokens=64, instance="p0->d1", error="" if status == RequestStatus.OK else "HTTP 500",
        prefix_group=i % 2, shared_prefix_len=64, session_id=i, turn=0, extra={"kv_transfer_s": 0.01 * i},
    )


def test_records_round_trip_through_parquet(tmp_path):
    records = [make_record(0), make_record(1, RequestStatus.FAILED), make_record(2, RequestStatus.REJECTED)]
    folder = RunFolder(tmp_path)
    path = folder.write_records(records)
    back = load_records(path)
    assert len(back) == 3
    assert back[0] == records[0]
    assert back[1].status is RequestStatus.FAILED and math.isnan(back[1].first_token_s)
    assert back[2].extra == {"kv_transfer_s": 0.02}


def test_records_frame_has_one_row_per_record():
    frame = records_frame([make_record(i) for i in range(5)])
    assert list(frame["request_id"]) == [0, 1, 2, 3, 4]
    assert frame["status"].tolist() == ["ok"] * 5


def test_failed_write_leaves_previous_file_and_no_temp(tmp_path):
    folder = RunFolder(tmp_path)
    folder.write_json("summary.json", {"status": "running"})

    class Boom:
        pass

    with pytest.raises(TypeError):
        folder.write_json("summary.json", {"status": "ok", "bad": Boom()})
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "running"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_summary_json_replaces_nan_by_null(tmp_path):
    folder = RunFolder(tmp_path)
    folder.write_summary(RunSummary(status="ok", experiment="e", job="j", kind="serve",
                                    metrics={"p99_ttft_ms": float("nan"), "n": 3}))
    summary = read_summary(tmp_path)
    assert summary["metrics"] == {"p99_ttft_ms": None, "n": 3}
    assert summary["schema_version"] == 1


def test_write_table_rejects_unknown_suffix(tmp_path):
    with pytest.raises(ValueError, match="parquet or .csv"):
        RunFolder(tmp_path).write_table("t.xlsx", pd.DataFrame({"a": [1]}))
