"""Azure LLM inference CSV loader: exact timestamps, the shipped traces, malformed files."""

from __future__ import annotations

import pytest

from workloads.azure_trace import AzureTraceWorkload, load_azure_trace, parse_timestamp_ticks
from workloads.config import AzureTraceConfig
from workloads.datadir import resolve_trace_path
from workloads.errors import TraceFormatError

CODE = "azure_llm_2023/AzureLLMInferenceTrace_code.csv"
CONV = "azure_llm_2023/AzureLLMInferenceTrace_conv.csv"
UNIX_EPOCH_TICKS = 621_355_968_000_000_000  # 1970-01-01 in 100-ns ticks since 0001-01-01 (.NET)
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def _write(tmp_path, lines, name="trace.csv", newline="\n"):
    path = tmp_path / name
    path.write_bytes(newline.join(lines).encode() + newline.encode())
    return path


@pytest.mark.parametrize(
    ("file", "rows", "first_unix_s", "first_frac", "duration_ticks"),
    [
        # 2023-11-16 18:17:03.9799600 -> 19:14:19.9280160: 3436 s - 0.97996 s + 0.928016 s
        (CODE, 8819, 1_700_158_623, 9_799_600, 3436 * 10**7 - 9_799_600 + 9_280_160),
        # 2023-11-16 18:15:46.6805900 -> 19:14:08.4025270: 3502 s - 0.68059 s + 0.402527 s
        (CONV, 19366, 1_700_158_546, 6_805_900, 3502 * 10**7 - 6_805_900 + 4_025_270),
    ],
)
def test_shipped_traces_exact_timestamps(file, rows, first_unix_s, first_frac, duration_ticks):
    loaded = load_azure_trace(resolve_trace_path(file))
    specs = loaded.specs
    assert len(specs) == rows
    assert loaded.stats["first_timestamp_ticks"] == UNIX_EPOCH_TICKS + first_unix_s * 10**7 + first_frac
    assert specs[0].arrival_s == 0.0
    assert specs[-1].arrival_s == duration_ticks / 1e7
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(specs, specs[1:], strict=False))
    assert min(s.output_length for s in specs) >= 1 and min(s.input_length for s in specs) >= 1


def test_code_trace_first_rows_and_unshared_hash_ids():
    requests = AzureTraceWorkload(AzureTraceConfig(name="code", kind="azure_trace", file=CODE)).requests()
    first, second = requests.specs[:2]
    assert (first.input_length, first.output_length, first.hash_ids) == (4808, 10, tuple(range(10)))
    assert (second.input_length, second.output_length, second.hash_ids) == (3180, 8, tuple(range(10, 17)))
    assert second.arrival_s == pytest.approx(0.052)
    all_ids = [h for s in requests.specs for h in s.hash_ids]
    assert len(all_ids) == len(set(all_ids))
    assert requests.stats["prefix_hit_rate_blocks"] == 0.0
    assert requests.stats["first_timestamp"] == "2023-11-16 18:17:03.9799600"
    assert [s.request_id for s in requests.specs] == list(range(8819))


@pytest.mark.parametrize(
    ("text", "frac_ticks"),
    [
        ("2023-11-16 18:17:03", 0),
        ("2023-11-16 18:17:03.", 0),
        ("2023-11-16 18:17:03.5", 5_000_000),
        ("2023-11-16 18:17:03.123", 1_230_000),
        ("2023-11-16 18:17:03.0000001", 1),
    ],
)
def test_timestamp_fraction_is_right_padded(text, frac_ticks):
    base = UNIX_EPOCH_TICKS + 1_700_158_623 * 10**7
    assert parse_timestamp_ticks(text) == base + frac_ticks


@pytest.mark.parametrize(
    "text",
    [
        "2023-11-16 18:17:03.12345678",
        "2023-02-30 00:00:00",
        "2023-11-16 24:00:00",
        "2023-11-16T18:17:03",
        "16/11/2023 18:17:03",
        " 2023-11-16 18:17:03",
    ],
)
def test_bad_timestamps_rejected(text):
    with pytest.raises(ValueError):
        parse_timestamp_ticks(text)


ROWS = ["2023-11-16 18:17:03.9799600,4808,10", "2023-11-16 18:17:04.0319600,3180,8"]


@pytest.mark.parametrize(
    ("bad", "field", "problem"),
    [
        ("2023-11-16 18:17:05.0,12", "row", "got 2 fields"),
        ("2023-11-16 18:17:05.0,12,1,9", "row", "got 4 fields"),
        ("", "row", "got 1 fields"),
        ("2023-11-16 18:17:05.123456789,12,1", "TIMESTAMP", "up to 7 fractional digits"),
        ("2023-11-16 18:17:04.0,12,1", "TIMESTAMP", "non-decreasing"),
        ("2023-11-16 18:17:05.0,abc,1", "ContextTokens", "expected an integer in [1, 10000000]"),
        ("2023-11-16 18:17:05.0,12,0", "GeneratedTokens", "expected an integer in [1, 10000000]"),
        ("2023-11-16 18:17:05.0,12,-3", "GeneratedTokens", "expected an integer in [1, 10000000]"),
    ],
)
def test_bad_rows_name_file_and_line(tmp_path, bad, field, problem):
    path = _write(tmp_path, [HEADER, *ROWS, bad, "2023-11-16 18:17:09.0,5,5"])
    with pytest.raises(TraceFormatError) as info:
        load_azure_trace(path)
    assert str(info.value).startswith(f"{path}:4: {field}: ")
    assert problem in str(info.value) and info.value.line == 4


def test_wrong_header_names_file_and_what_was_found(tmp_path):
    path = _write(tmp_path, ["TIMESTAMP,ContextTokens,GeneratedTokens,Extra", *ROWS], name="odd.csv")
    with pytest.raises(TraceFormatError) as info:
        load_azure_trace(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}:1: header: ") and "GeneratedTokens,Extra" in msg and f"{HEADER!r}" in msg


def test_header_only_is_an_error(tmp_path):
    with pytest.raises(TraceFormatError, match=":2: row: no data rows"):
        load_azure_trace(_write(tmp_path, [HEADER]))


def test_crlf_and_block_size(tmp_path):
    path = _write(tmp_path, [HEADER, *ROWS], newline="\r\n")
    specs = load_azure_trace(path, block_size=1000).specs
    assert [len(s.hash_ids) for s in specs] == [5, 4]
    assert specs[1].hash_ids == (5, 6, 7, 8) and specs[1].block_size == 1000
    assert specs[1].arrival_s == 0.052
