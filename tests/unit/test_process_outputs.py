"""The faster paths of a run's process give exactly what the plain ones gave: ``requests.parquet`` byte for
byte, the summary and validity numbers, the trace's ticks, the predicted prefix hits, the capped requests and
the git state (harness/results.py, harness/metrics.py, harness/validity.py, harness/prompts.py,
workloads/azure_trace.py, harness/provenance.py)."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import random

import numpy as np
import pandas as pd
import pytest

from harness.metrics import extract_columns, request_frame, summarize
from harness.prompts import fit_to_context, infinite_cache_hit_blocks, predicted_prefix_hit_rate
from harness.results import _RECORD_FIELDS, records_frame
from harness.slo import SLOConfig
from harness.validity import _binomial_cdf, assess_validity, quantile_bounds
from systems.kvcache import EvictionPolicy, flatten_blocks, replay_prefix_hits
from vocab.records import RequestRecord, RequestSpec, RequestStatus
from workloads import azure_trace
from workloads.arrivals import ArrivalSchedule
from workloads.base import WorkloadRequests

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def plain_records_frame(records):
    """records_frame as it was: lists of floats and json.dumps."""
    columns = {name: [getattr(r, name) for r in records] for name in _RECORD_FIELDS}
    columns["status"] = [str(s) for s in columns["status"]]
    columns["chunk_times_s"] = [list(c) for c in columns["chunk_times_s"]]
    columns["extra"] = [json.dumps(e, sort_keys=True) for e in columns["extra"]]
    return pd.DataFrame(columns, columns=_RECORD_FIELDS)


def parquet_bytes(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def record(i, chunks, extra, status=RequestStatus.OK, **kw):
    times = tuple(chunks)
    return RequestRecord(i, status, 0.25 * i, 0.25 * i, times[0] if times else math.nan,
                         times[-1] if times else math.nan, 10 + i, 8, len(times), times, extra=extra, **kw)


def simulated_like(n: int, seed: int = 0) -> list[RequestRecord]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        k = rng.randrange(0, 40)
        t0 = 0.25 * i + rng.random()
        chunks = [t0 + 0.02 * j + rng.random() * 1e-3 for j in range(k)]
        extra = {"queue_s": rng.choice([0.0, rng.random()]), "prefill_s": rng.random(), "kv_transfer_s": 0.0,
                 "preemptions": float(rng.randrange(3))}
        status = RequestStatus.OK if k else rng.choice([RequestStatus.FAILED, RequestStatus.REJECTED])
        out.append(record(i, chunks, extra, status, instance=f"C{i % 4}", cached_tokens=rng.randrange(-1, 64)))
    return out


CASES = {
    "simulated": simulated_like(300),
    "none": [],
    "no chunk times": [record(0, [], {}), record(1, [], {})],
    "equal lengths": [record(i, [1.0 + i, 2.0 + i], {"a": 0.5}) for i in range(4)],
    "nan": [record(0, [1.0, math.nan], {"a": 1.0}), record(1, [2.0], {"a": math.nan})],
    "integer times": [record(0, [1, 2], {"a": 1}), record(1, [3], {"a": 2})],
    "mixed": [record(0, [1.0, 2], {"b": 1, "a": 2.5}), record(1, [], {"a": 2.0, "b": 3})],
    "other keys": [record(0, [1.0], {"a": 1.0}), record(1, [2.0], {"b": 2.0})],
    "numpy and bool": [record(0, [1.0], {"a": np.float64(1.0), "t": True}), record(1, [2.0], {"a": 3.0, "t": 1})],
    "inf and -0.0": [record(0, [1.0], {"a": math.inf, "z": -0.0}), record(1, [2.0], {"a": 1.0, "z": 0.0})],
    "-0.0 repeated": [record(i, [1.0], {"z": -0.0 if i == 3 else 0.0}) for i in range(8)],
    "escaped keys": [record(0, [1.0], {'k"{x}': 1.0, "\u00e9": 2.0})],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_requests_parquet_is_byte_for_byte_what_lists_and_json_gave(case):
    records = CASES[case]
    fast, plain = records_frame(records), plain_records_frame(records)
    assert fast["extra"].tolist() == plain["extra"].tolist()
    assert parquet_bytes(fast) == parquet_bytes(plain)


def test_the_gathered_chunk_times_give_the_same_bytes():
    records = CASES["simulated"]
    columns = extract_columns(records)
    assert parquet_bytes(records_frame(records, columns.chunk_times_s)) == parquet_bytes(plain_records_frame(records))


def test_summary_frame_and_bounds_are_the_same_from_records_or_columns():
    records = CASES["simulated"]
    slo = SLOConfig(name="s", ttft_ms=500.0, tpot_ms=25.0)
    columns = extract_columns(records)
    assert summarize(columns, slo, n_gpus=8) == summarize(records, slo, n_gpus=8)
    pd.testing.assert_frame_equal(request_frame(columns), request_frame(records))
    assert quantile_bounds(columns, [90.0, 99.0], 0.95) == quantile_bounds(records, [90.0, 99.0], 0.95)
    metrics = summarize(records, slo, n_gpus=8)
    from harness.validity import ValidityConfig

    cfg = ValidityConfig(max_ci_relative_width=0.5)
    assert assess_validity(records, metrics, cfg, columns=columns) == assess_validity(records, metrics, cfg)


@pytest.mark.parametrize(("n", "p"), [(1, 0.5), (7, 0.9), (200, 0.99), (5000, 0.9)])
def test_binomial_cdf_is_unchanged(n, p):
    k = np.arange(n + 1, dtype=float)
    log_pmf = (math.lgamma(n + 1) - np.array([math.lgamma(x + 1) for x in k])
               - np.array([math.lgamma(n - x + 1) for x in k]) + k * math.log(p) + (n - k) * math.log1p(-p))
    assert np.array_equal(_binomial_cdf(n, p), np.minimum(np.cumsum(np.exp(log_pmf)), 1.0))


def _replayed(specs):
    dense, offsets = flatten_blocks([s.hash_ids for s in specs])
    return replay_prefix_hits(dense, offsets, None, EvictionPolicy.LRU)


def test_infinite_cache_hits_are_the_replays():
    rng = random.Random(3)
    for _ in range(200):
        specs = [RequestSpec(i, 0.0, 600, 1, tuple(rng.randrange(rng.choice([2, 6, 40]))
                                                   for _ in range(rng.randrange(0, 8))))
                 for i in range(rng.randrange(1, 30))]
        assert infinite_cache_hit_blocks(specs).tolist() == _replayed(specs).tolist()
    huge = [RequestSpec(0, 0.0, 1024, 1, (2**70, 5)), RequestSpec(1, 0.0, 1024, 1, (2**70, 6))]  # beyond int64
    assert infinite_cache_hit_blocks(huge).tolist() == [0, 1]


def test_predicted_hit_rate_on_the_conversation_trace(shared_traces):
    from workloads.mooncake_trace import load_mooncake_trace

    specs = load_mooncake_trace(shared_traces / "mooncake_fast25" / "conversation_trace.jsonl").specs[:3000]
    hits = _replayed(specs)
    assert infinite_cache_hit_blocks(specs).tolist() == hits.tolist() and hits.sum() > 0
    block = np.array([s.block_size for s in specs])
    length = np.array([s.input_length for s in specs])
    expected = float(((np.minimum(hits * block, length - 1) // 16) * 16).sum() / length.sum())
    assert predicted_prefix_hit_rate(specs, 16) == expected


def test_capping_to_the_context_is_unchanged():
    rng = random.Random(5)
    specs = tuple(RequestSpec(i, 0.1 * i, rng.randrange(1, 9000), rng.randrange(1, 5000),
                              tuple(range(10 * i, 10 * i + 12)), 512, shared_prefix_len=rng.randrange(0, 9000))
                  for i in range(500))
    requests = WorkloadRequests(specs, ArrivalSchedule("open", None, 10.0, 49.9), {})
    capped, info = fit_to_context(requests, 4096)

    def plain(spec):  # fit_to_context as it was, request by request
        out = spec.output_length
        if out > 2048 and spec.input_length + out > 4096:
            out = 2048
        new = dataclasses.replace(spec, output_length=out)
        if spec.input_length > 4096 - out:
            budget = 4096 - out
            new = dataclasses.replace(new, input_length=budget, hash_ids=spec.hash_ids[:math.ceil(budget / 512)],
                                      shared_prefix_len=min(spec.shared_prefix_len, budget))
        return new

    assert capped.specs == tuple(plain(s) for s in specs)
    assert info["n_prompt_capped"] == sum(s.input_length > 4096 - min(s.output_length, 2048) for s in specs) > 0


def _trace(tmp_path, rows, name="t.csv"):
    path = tmp_path / name
    path.write_text("\n".join([HEADER, *rows]) + "\n", encoding="utf-8")
    return path


def _both(path):
    lines = path.read_text(encoding="utf-8-sig").split("\n")
    if lines[-1] == "":
        lines.pop()
    return azure_trace._fast_rows(lines), azure_trace._checked_rows(path, lines)


def test_the_array_parser_gives_the_row_parsers_ticks(tmp_path):
    rows = ["0001-01-01 00:00:00.0000000,1,1", "1900-02-28 23:59:59.9999999,10000000,3",
            "2000-02-29 12:00:00.0000001,0007,42", "2023-11-16 18:15:46.6805900,374,44",
            "2024-02-29 00:00:00.5000000,5,5", "2024-12-31 23:59:59.9999999,999999,1"]
    fast, checked = _both(_trace(tmp_path, rows))
    assert fast == checked and fast[1] == [1, 10000000, 7, 374, 5, 999999]


@pytest.mark.parametrize("bad", ["2023-02-29 00:00:00.0000000,1,1", "2023-13-01 00:00:00.0000000,1,1",
                                 "2023-11-16 24:00:00.0000000,1,1", "2023-11-16 18:15:46.6805900,0,1",
                                 "2023-11-16 18:15:46.6805900,1,10000001", "0000-03-01 00:00:00.0000000,1,1",
                                 "2023-11-16 18:15:46.68059,1,1", "2023-11-16 18:15:46.6805900,1,1,1",
                                 "2023-11-16 00:00:00.0000000,1,1"])
def test_rows_the_array_parser_does_not_take_go_row_by_row(tmp_path, bad):
    path = _trace(tmp_path, ["2023-11-16 18:15:46.6805900,1,1", bad])
    lines = path.read_text(encoding="utf-8").split("\n")
    lines.pop()
    assert azure_trace._fast_rows(lines) is None  # then load_azure_trace parses row by row (and names the row)


def test_the_shipped_trace_parses_the_same_both_ways(shared_traces):
    fast, checked = _both(shared_traces / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv")
    assert fast is not None and fast == checked and len(fast[0]) == 19366


@pytest.mark.integration
def test_git_state_from_one_status_call(tmp_path):
    import subprocess

    from harness.provenance import git_state

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), "-c", "user.email=t@example.com", "-c", "user.name=t",
                               *args], capture_output=True, text=True, check=True).stdout.strip()

    assert git_state(tmp_path) == ("", False)  # not a checkout
    git("init", "-q")
    assert git_state(tmp_path) == ("", False)  # no commit yet
    (tmp_path / "a.txt").write_text("1", encoding="utf-8")
    git("add", "a.txt")
    git("commit", "-qm", "first")
    sha = git("rev-parse", "HEAD")
    assert git_state(tmp_path) == (sha, False)
    (tmp_path / "new.txt").write_text("untracked files do not count", encoding="utf-8")
    assert git_state(tmp_path) == (sha, False)
    (tmp_path / "a.txt").write_text("2", encoding="utf-8")
    assert git_state(tmp_path) == (sha, True)
