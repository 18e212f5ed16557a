"""DistServe's measured runs: the measured/workload readers (never running code), run names, the distinct
requests of a folder, the ``distserve_requests`` workload, and the authors' 24 published runs."""

from __future__ import annotations

import ast
import json
from collections import Counter
from pathlib import Path

import pytest

import workloads.distserve_runs as runs
from workloads.datadir import resolve_trace_path
from workloads.distserve_runs import (
    MeasuredRequest,
    distinct_requests,
    load_distserve_requests,
    parse_run_name,
    read_measured_run,
    read_workload_run,
)
from workloads.errors import TraceFormatError, TraceNotFoundError
from workloads.registry import build_workload

DISTSERVE_DIR = "distserve_opt13b_a100"
SUMMARY = "{\n\tnum_requests: 3\n\ttest_duration_ms: 1234.5\n\tavg_ttft_ms: 12.0\n}"


def _req(prompt=10, output=4, issue=1.0, first=1.25, complete=2.0, **extra):
    entry = {"prompt_len": prompt, "output_len": output, "issue_time": issue, "first_token_time": first,
             "complete_time": complete}
    entry.update(extra)
    return entry


def _measured(tmp_path: Path, line1: str | bytes, summary: str = SUMMARY, name: str = "run.exp") -> Path:
    path = tmp_path / name
    body = line1 if isinstance(line1, bytes) else line1.encode("utf-8")
    path.write_bytes(body + b"\n" + summary.encode("utf-8"))
    return path


def _workload(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows), encoding="utf-8")
    return path


def _rows(pairs, step=0.5):
    return [{"prompt_len": p, "output_len": o, "start_time": i * step} for i, (p, o) in enumerate(pairs)]


# --- measured/<run>.exp ------------------------------------------------------------------------------------


def test_measured_run_reads_back_in_issue_order_with_client_metrics(tmp_path):
    # completion order in the file (as the real files are), single-quoted literal, a summary block after it
    entries = [_req(100, 5, issue=3.0, first=3.2, complete=3.6),
               _req(7, 1, issue=1.0, first=1.5, complete=1.5),
               _req(55, 3, issue=2.0, first=2.1, complete=2.5, ttft_ms=999.0, tpot_ms=1.0, latency_ms=2.0)]
    path = _measured(tmp_path, repr(entries))
    assert path.read_text().splitlines()[1:] == ["{", "\tnum_requests: 3", "\ttest_duration_ms: 1234.5",
                                                "\tavg_ttft_ms: 12.0", "}"]
    got = read_measured_run(path)
    assert [(r.prompt_len, r.output_len) for r in got] == [(7, 1), (55, 3), (100, 5)]
    assert [r.issue_s for r in got] == [1.0, 2.0, 3.0]
    assert got[0].tpot_ms == 0.0  # one-token output
    assert got[0].ttft_ms == pytest.approx(500.0)
    assert got[1].ttft_ms == pytest.approx((2.1 - 2.0) * 1e3)
    assert got[1].tpot_ms == pytest.approx((2.5 - 2.1) * 1e3 / 2)
    assert got[2].ttft_ms == pytest.approx(200.0) and got[2].tpot_ms == pytest.approx(100.0)
    assert all(isinstance(r, MeasuredRequest) for r in got)


def test_measured_run_accepts_integer_times_and_crlf(tmp_path):
    path = _measured(tmp_path, repr([_req(issue=1, first=2, complete=5, output=4)]) + "\r", summary="")
    (req,) = read_measured_run(path)
    assert (req.issue_s, req.first_token_s, req.complete_s) == (1.0, 2.0, 5.0)
    assert req.tpot_ms == pytest.approx(1000.0)


@pytest.mark.parametrize("line1", [
    "[__import__('os').system('touch PWNED')]",
    "[{'prompt_len': (lambda: open('PWNED', 'w'))(), 'output_len': 1}]",
    "[{'prompt_len': (lambda: 1)()}]",
    "[open('PWNED', 'w').close()]",
    "[exec(\"open('PWNED', 'w')\")]",
    "[{'prompt_len': 1, **__builtins__}]",
    "[x for x in [open('PWNED', 'w')]]",
])
def test_hostile_first_line_is_refused_without_running_it(tmp_path, monkeypatch, line1):
    monkeypatch.chdir(tmp_path)
    path = _measured(tmp_path, line1)
    with pytest.raises(TraceFormatError) as info:
        read_measured_run(path)
    assert not (tmp_path / "PWNED").exists()
    assert not Path("PWNED").exists()
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), 1, "requests")
    assert str(err).startswith(f"{path}:1: requests: not a Python literal")


@pytest.mark.parametrize(("line1", "field", "words"), [
    ("{'prompt_len': 1}", "requests", "got dict, expected a non-empty list"),
    ("[]", "requests", "got list, expected a non-empty list"),
    ("None", "requests", "got NoneType"),
    ("[1, 2]", "request 0", "got int, expected a dict"),
    (f"[{_req()!r}, 'x']", "request 1", "got str, expected a dict"),
    ("[{'prompt_len': 3, 'output_len': 2, 'issue_time': 0.0}]", "request 0",
     "missing first_token_time, complete_time"),
    (f"[{_req()!r}, {{'prompt_len': 3}}]", "request 1", "missing output_len, issue_time, first_token_time, complete_time"),
    (repr([_req(prompt=1.5)]), "request 0.prompt_len", "got 1.5, expected an integer"),
    (repr([_req(prompt="10")]), "request 0.prompt_len", "got '10'"),
    (repr([_req(), _req(prompt=0)]), "request 1.prompt_len", "got 0"),
    (repr([_req(output=-3)]), "request 0.output_len", "got -3"),
    (repr([_req(output=True)]), "request 0.output_len", "got True"),
    (repr([_req(prompt=10**8)]), "request 0.prompt_len", "expected an integer in [1, 10000000]"),
    (repr([_req(issue=-1.0)]), "request 0.issue_time", "got -1.0, expected a finite number >= 0"),
    ("[" + repr(_req())[:-1].replace("'complete_time': 2.0", "'complete_time': 1e999") + "}]",
     "request 0.complete_time", "got inf"),
    (repr([_req(first=float("-inf"))]).replace("-inf", "-1e999"), "request 0.first_token_time", "got -inf"),
    (repr([_req(first=False)]), "request 0.first_token_time", "got False"),
    (repr([_req(first=(1 + 2j))]), "request 0.first_token_time", "got (1+2j)"),
    (repr([_req(), _req(issue=5.0, first=4.0, complete=6.0)]), "request 1", "times out of order"),
    (repr([_req(issue=1.0, first=3.0, complete=2.0)]), "request 0", "expected issue <= first <= complete"),
])
def test_malformed_measured_runs_name_file_line_and_request(tmp_path, line1, field, words):
    path = _measured(tmp_path, line1)
    with pytest.raises(TraceFormatError) as info:
        read_measured_run(path)
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), 1, field)
    assert str(err).startswith(f"{path}:1: {field}: ")
    assert words in str(err)


def test_nan_time_in_a_measured_run_is_refused(tmp_path, monkeypatch):
    # a literal cannot spell NaN; check the value check itself on what literal_eval would hand it
    path = _measured(tmp_path, "[]")
    monkeypatch.setattr(runs.ast, "literal_eval", lambda text: [_req(complete=float("nan"))])
    with pytest.raises(TraceFormatError, match=r"request 0\.complete_time: got nan, expected a finite number"):
        read_measured_run(path)


@pytest.mark.parametrize("line1", [
    "[" * 100000,  # the parser's nesting limit
    "[" * 100000 + "]" * 100000,
    "-" * 100000 + "1",  # MemoryError in the parser
    "1" + "+1" * 100000,  # RecursionError building the tree
    "[" + "9" * 5000 + "]",  # past Python's int-digits limit
    "[{'prompt_len': 1",  # truncated
    "",  # empty first line
])
def test_pathological_literals_become_format_errors(tmp_path, line1):
    path = _measured(tmp_path, line1)
    with pytest.raises(TraceFormatError) as info:
        read_measured_run(path)
    assert (info.value.path, info.value.line, info.value.field) == (str(path), 1, "requests")
    assert "not a Python literal" in info.value.problem


def test_not_utf8_first_line_names_the_file_and_line(tmp_path):
    path = _measured(tmp_path, b"[{'prompt_len': 1\xff\xfe}]")
    with pytest.raises(TraceFormatError) as info:
        read_measured_run(path)
    assert (info.value.path, info.value.line, info.value.field) == (str(path), 1, "encoding")
    assert "0xff" in str(info.value) and "not UTF-8" in str(info.value)


def test_first_line_over_the_size_limit_is_refused_before_parsing(tmp_path, monkeypatch):
    ok = repr([_req()])
    monkeypatch.setattr(runs, "MAX_LINE_BYTES", len(ok) + 1)  # the line and its newline fit
    assert read_measured_run(_measured(tmp_path, ok, name="ok.exp"))[0].prompt_len == 10
    path = _measured(tmp_path, repr([_req(), _req()]))
    parsed = []
    monkeypatch.setattr(runs.ast, "literal_eval", lambda text: parsed.append(text))
    with pytest.raises(TraceFormatError) as info:
        read_measured_run(path)
    assert (info.value.path, info.value.line, info.value.field) == (str(path), 1, "requests")
    assert "line longer than" in str(info.value)
    assert parsed == []  # never handed to the parser


def test_missing_measured_file_is_a_format_error_naming_it(tmp_path):
    path = tmp_path / "absent.exp"
    with pytest.raises(TraceFormatError, match=r"absent\.exp:1: file: cannot be read"):
        read_measured_run(path)


# --- workload/<run>.exp ------------------------------------------------------------------------------------


def test_workload_run_sorted_by_start_time(tmp_path):
    rows = [{"prompt_len": 30, "output_len": 3, "start_time": 2.5},
            {"prompt_len": 10, "output_len": 1, "start_time": 0.0},
            {"prompt_len": 20, "output_len": 2, "start_time": 1}]
    got = read_workload_run(_workload(tmp_path / "w.exp", rows))
    assert got == [(10, 1, 0.0), (20, 2, 1.0), (30, 3, 2.5)]
    assert all(isinstance(start, float) for _, _, start in got)


def test_workload_run_invalid_json_names_the_line(tmp_path):
    path = tmp_path / "w.exp"
    path.write_text('[\n{"prompt_len": 1, "output_len": 2, "start_time": 0.0},\n{"prompt_len": oops}\n]')
    with pytest.raises(TraceFormatError) as info:
        read_workload_run(path)
    assert (info.value.path, info.value.line, info.value.field) == (str(path), 3, "requests")
    assert "not JSON" in str(info.value)


@pytest.mark.parametrize(("text", "field", "words"), [
    ('[{"prompt_len": 1, "output_len": 2}]', "request 0", "missing start_time"),
    ('[{"prompt_len": 1, "output_len": 2, "start_time": 0}, {"output_len": 2}]', "request 1",
     "missing prompt_len, start_time"),
    ('{"prompt_len": 1}', "requests", "expected a non-empty list"),
    ("[]", "requests", "expected a non-empty list"),
    ('[[1, 2, 0.0]]', "request 0", "expected a dict"),
    ('[{"prompt_len": "5", "output_len": 2, "start_time": 0}]', "request 0.prompt_len", "got '5'"),
    ('[{"prompt_len": 5, "output_len": 0, "start_time": 0}]', "request 0.output_len", "got 0"),
    ('[{"prompt_len": 5, "output_len": true, "start_time": 0}]', "request 0.output_len", "got True"),
    ('[{"prompt_len": 5.0, "output_len": 2, "start_time": 0}]', "request 0.prompt_len", "got 5.0"),
    ('[{"prompt_len": 5, "output_len": 2, "start_time": NaN}]', "request 0.start_time", "got nan"),
    ('[{"prompt_len": 5, "output_len": 2, "start_time": Infinity}]', "request 0.start_time", "got inf"),
    ('[{"prompt_len": 5, "output_len": 2, "start_time": -0.5}]', "request 0.start_time", "got -0.5"),
    ('[{"prompt_len": 5, "output_len": 2, "start_time": null}]', "request 0.start_time", "got None"),
])
def test_workload_run_bad_entries_name_the_request_and_key(tmp_path, text, field, words):
    path = tmp_path / "w.exp"
    path.write_text(text)
    with pytest.raises(TraceFormatError) as info:
        read_workload_run(path)
    assert (info.value.path, info.value.field) == (str(path), field)
    assert words in str(info.value)


def test_workload_run_deep_nesting_and_bad_bytes(tmp_path):
    deep = tmp_path / "deep.exp"
    deep.write_text("[" * 200000 + "]" * 200000)
    with pytest.raises(TraceFormatError, match=r"deep\.exp:1: requests: "):
        read_workload_run(deep)
    raw = tmp_path / "raw.exp"
    raw.write_bytes(b'[{"prompt_len": 5,\n "output_len": 2, "start_time": "\xff"}]')
    with pytest.raises(TraceFormatError) as info:
        read_workload_run(raw)
    assert (info.value.line, info.value.field) == (2, "encoding")


# --- run names -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "parts"), [
    ("vllm-300-3", ("vllm-300-3", "vllm", "", 300, 3.0)),
    ("distserve-c21d12-1600-16", ("distserve-c21d12-1600-16", "distserve", "c21d12", 1600, 16.0)),
    ("distserve-100-1.5", ("distserve-100-1.5", "distserve", "", 100, 1.5)),
    ("distserve-c21d12-600-6.exp", ("distserve-c21d12-600-6", "distserve", "c21d12", 600, 6.0)),
])
def test_parse_run_name(name, parts):
    got = parse_run_name(name)
    assert (got.name, got.system, got.layout, got.n_requests, got.rate_rps) == parts


@pytest.mark.parametrize("name", ["sglang-300-3", "vllm-300", "vllm-c2d1-300-3", "distserve-c21d12-x-3",
                                  "vllm-300-3.", "vllm-300-3-extra", "", "vllm-300-3.json"])
def test_parse_run_name_rejects_other_forms(name):
    with pytest.raises(ValueError, match=r"expected <distserve\|vllm>\[-c<tp_p><pp_p>d<tp_d><pp_d>\]-<N>-<rate>") as info:
        parse_run_name(name)
    assert repr(name) in str(info.value)


# --- distinct requests ---------------------------------------------------------------------------------------


def test_distinct_requests_of_prefix_runs_is_the_largest_run():
    sample = [(10, 5, 0.0), (20, 6, 1.0), (10, 5, 2.0), (30, 7, 3.0), (40, 8, 4.0), (10, 5, 5.0)]
    prefix_runs = [sample[:2], sample[:5], sample[:3], sample]
    assert distinct_requests(prefix_runs) == sample
    assert distinct_requests([sample[:4], sample[:2]]) == sample[:4]


def test_distinct_requests_keeps_a_pair_as_often_as_the_run_with_most_of_it():
    many_of_one = [(1, 1, 0.0), (1, 1, 0.1), (1, 1, 0.2)]
    larger = [(1, 1, 9.0), (2, 2, 9.1), (3, 3, 9.2), (4, 4, 9.3)]
    got = distinct_requests([many_of_one, larger])
    assert got[:4] == larger  # largest run first
    assert Counter((p, o) for p, o, _ in got) == Counter({(1, 1): 3, (2, 2): 1, (3, 3): 1, (4, 4): 1})
    assert distinct_requests([]) == []


# --- the distserve_requests workload -------------------------------------------------------------------------


def _cfg(file, arrival, **extra):
    return {"kind": "distserve_requests", "name": "x", "file": str(file), "arrival": arrival, **extra}


def test_workload_replays_one_file_with_its_arrivals(tmp_path):
    rows = [{"prompt_len": 1000, "output_len": 3, "start_time": 0.0},
            {"prompt_len": 20, "output_len": 1, "start_time": 1.75},
            {"prompt_len": 513, "output_len": 40, "start_time": 0.5}]
    path = _workload(tmp_path / "vllm-3-1.exp", rows)
    got = build_workload(_cfg(path, {"kind": "trace"})).requests()
    assert [(s.arrival_s, s.input_length, s.output_length) for s in got.specs] == [
        (0.0, 1000, 3), (0.5, 513, 40), (1.75, 20, 1)]
    assert [s.request_id for s in got.specs] == [0, 1, 2]
    assert [len(s.hash_ids) for s in got.specs] == [2, 2, 1]  # ceil(prompt / 512), never shared
    assert len({h for s in got.specs for h in s.hash_ids}) == 5
    assert got.stats["kind"] == "distserve_requests" and got.stats["n_files"] == 1


def _folder(tmp_path):
    sample = [(17 * i + 3, i + 1) for i in range(30)] + [(20, 1)]  # (20, 1) twice in the largest run
    sample[5] = (20, 1)
    folder = tmp_path / "workload"
    _workload(folder / "vllm-10-1.exp", _rows(sample[:10]))
    _workload(folder / "distserve-31-2.exp", _rows(sample))
    _workload(folder / "vllm-20-3.exp", _rows(sample[:20], step=0.25))
    (folder / "README.md").write_text("not a run")
    return folder, sample


def test_workload_pools_a_folder_shuffled_by_sample_seed(tmp_path):
    folder, sample = _folder(tmp_path)
    poisson = {"kind": "poisson", "rate_rps": 2.0, "seed": 0}
    a = build_workload(_cfg(folder, poisson)).requests()
    again = build_workload(_cfg(folder, poisson)).requests()
    other = build_workload(_cfg(folder, poisson, sample_seed=1)).requests()
    in_order = build_workload(_cfg(folder, poisson, sample_seed=None)).requests()

    def pairs(w):
        return [(s.input_length, s.output_length) for s in w.specs]

    assert pairs(in_order) == sample  # the distinct requests: the largest run's
    assert Counter(pairs(a)) == Counter(sample) == Counter(pairs(other))
    assert pairs(a) == pairs(again)
    assert pairs(a) != pairs(other) and pairs(a) != sample
    assert a.stats["n_files"] == 3 and a.stats["n_rows"] == 31
    times = [s.arrival_s for s in a.specs]
    assert times == sorted(times) and times == [s.arrival_s for s in again.specs]
    assert times[0] >= 0 and times[-1] > 0 and len(set(times)) == len(times)  # synthetic Poisson, not the files'
    assert a.schedule.mode == "open"
    assert [s.request_id for s in a.specs] == list(range(31))


def test_folder_with_trace_arrivals_is_refused(tmp_path):
    folder, _ = _folder(tmp_path)
    with pytest.raises(TraceFormatError, match=r"arrival\.kind") as info:
        build_workload(_cfg(folder, {"kind": "trace"})).requests()
    assert "poisson" in str(info.value) and str(folder) in str(info.value)


def test_empty_folder_and_missing_file(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TraceFormatError, match=r"has no \*\.exp workload files"):
        load_distserve_requests(empty)
    with pytest.raises(TraceNotFoundError):
        build_workload(_cfg(tmp_path / "nope.exp", {"kind": "trace"}))
    with pytest.raises(TraceNotFoundError, match=r"nope\.exp"):
        build_workload(_cfg("distserve_opt13b_a100/workload/nope.exp", {"kind": "trace"}),
                       data_dir=str(tmp_path)).requests()


# --- the authors' published runs -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def distserve_dir() -> Path:
    try:
        path = resolve_trace_path(DISTSERVE_DIR, allow_dir=True)
    except TraceNotFoundError:
        pytest.skip(f"{DISTSERVE_DIR} not in the trace directories")
    if not (path / "measured").is_dir() or not (path / "workload").is_dir():
        pytest.skip(f"{path} has no measured/ and workload/ folders")
    return path


def test_published_runs_agree_with_their_workloads(distserve_dir):
    measured = sorted((distserve_dir / "measured").glob("*.exp"))
    assert len(measured) == 24
    for path in measured:
        name = parse_run_name(path.name)
        got = read_measured_run(path)
        assert len(got) == name.n_requests, path.name
        workload = read_workload_run(distserve_dir / "workload" / path.name)
        assert [(r.prompt_len, r.output_len) for r in got] == [(p, o) for p, o, _ in workload], path.name
    pooled = distinct_requests([read_workload_run(f) for f in sorted((distserve_dir / "workload").glob("*.exp"))])
    assert len(pooled) == 1600


def test_published_client_metrics_recomputed(distserve_dir):
    for path in sorted((distserve_dir / "measured").glob("*.exp")):
        with path.open(encoding="utf-8") as fh:
            entries = ast.literal_eval(fh.readline())
        by_issue = sorted(entries, key=lambda e: e["issue_time"])
        got = read_measured_run(path)
        assert len(got) == len(by_issue)
        for req, entry in zip(got, by_issue, strict=True):
            assert req.issue_s == entry["issue_time"]
            assert abs(req.ttft_ms - entry["ttft_ms"]) <= 1e-6, path.name
            assert abs(req.tpot_ms - entry["tpot_ms"]) <= 1e-6, path.name
