"""The scale benchmark's pieces that do not need its hours: a case run in-process (records as a serving job's
columns or as objects, all requests or only the first), and the instruction count's command and parsing."""

from __future__ import annotations

import sys

import pytest

from benchmarks import sim_scale_bench as bench

VALGRIND_TAIL = """==4242==
==4242== I   refs:      10,410,375,293
"""


def test_the_instruction_count_is_read_from_valgrinds_summary() -> None:
    assert bench.instructions_of("==1== Cachegrind, a cache profiler\n" + VALGRIND_TAIL) == 10_410_375_293


def test_output_without_a_count_is_an_error_that_shows_it() -> None:
    with pytest.raises(ValueError, match="no 'I refs' line.*valgrind: command not usable"):
        bench.instructions_of("valgrind: command not usable")


def test_the_valgrind_command_runs_one_case_under_cachegrind_without_its_cache_model() -> None:
    cmd = bench.valgrind_command("mooncake", 1024, 20_480, 1, "columns", valgrind="/usr/bin/valgrind")
    assert cmd[:4] == ["/usr/bin/valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
    assert cmd[4:7] == [sys.executable, "-m", "benchmarks.sim_scale_bench"]
    args = cmd[7:]
    assert dict(zip(args[::2], args[1::2], strict=True)) == {
        "--case": "mooncake", "--instances": "1024", "--case-requests": "20480", "--simulate-first": "1",
        "--records": "columns"}


@pytest.mark.parametrize("records", bench.RECORDS)
def test_a_case_counts_what_it_simulated(records: str) -> None:
    whole = bench.run_case("baseline", 4, 300, records)
    first = bench.run_case("baseline", 4, 300, records, simulate_first=40)
    assert (whole["requests"], first["requests"]) == (300, 40)
    assert whole["ok"] == 300 and first["ok"] == 40
    assert first["tokens"] < whole["tokens"]
    assert whole["records"] == records and whole["events"] > first["events"] > 0


def test_records_made_as_columns_or_as_objects_count_the_same_tokens() -> None:
    columns = bench.run_case("distserve", 4, 200, "columns")
    objects = bench.run_case("distserve", 4, 200, "objects")
    dropped = bench.run_case("distserve", 4, 200, "objects", keep_records=False)
    assert columns["tokens"] == objects["tokens"] == dropped["tokens"] > 200
    assert columns["ok"] == objects["ok"] == dropped["ok"]


def test_a_reference_checkout_must_be_this_project_with_its_virtualenv(tmp_path) -> None:
    with pytest.raises(SystemExit, match="not a checkout of this project"):
        bench.Checkout.of(str(tmp_path))
    (tmp_path / "harness" / "bench").mkdir(parents=True)
    (tmp_path / "harness" / "bench" / "sim_scale_bench.py").write_text("")
    with pytest.raises(SystemExit, match="no virtualenv at .*/.venv/bin/python"):
        bench.Checkout.of(str(tmp_path))
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").write_text("")
    found = bench.Checkout.of(str(tmp_path))
    assert found.root == tmp_path.resolve() and found.python == str(tmp_path.resolve() / ".venv" / "bin" / "python")


@pytest.mark.integration
def test_a_failing_reference_case_exits_with_its_error(tmp_path) -> None:
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 'no such module' >&2\nexit 3\n")
    python.chmod(0o755)
    with pytest.raises(SystemExit, match=r"failed in .* \(3\): no such module"):
        bench._subprocess("baseline", 4, 10, "columns", checkout=bench.Checkout(tmp_path, str(python)))


def test_cache_misses_use_cachegrinds_cache_model_and_its_last_level_line() -> None:
    cmd = bench.valgrind_command("baseline", 16, 100, 1, "columns", valgrind="vg", cache_sim=True)
    assert cmd[:5] == ["vg", "--tool=cachegrind", "--cache-sim=yes", bench.CACHE_MODEL, "--cachegrind-out-file=/dev/null"]
    tail = "==7== LL refs:  1,234 (1,000 rd + 234 wr)\n==7== LL misses:      56,789  (  50,000 rd   +   6,789 wr)\n"
    assert bench.instructions_of(VALGRIND_TAIL + tail, bench.VALGRIND_LL_MISSES) == 56_789
    with pytest.raises(ValueError, match="no 'LL misses' line"):
        bench.instructions_of(VALGRIND_TAIL, bench.VALGRIND_LL_MISSES)


def test_paired_ratios_divide_each_repeats_large_run_by_its_small_one() -> None:
    small = [{"total_s": 2.0, "requests": 1000}, {"total_s": 1.0, "requests": 1000}]
    large = [{"total_s": 3.0, "requests": 1000}, {"total_s": 2.0, "requests": 2000}]
    assert bench.paired_ratios(small, large) == pytest.approx([1.5, 1.0])
    with pytest.raises(ValueError, match="2 runs of the small size against 1"):
        bench.paired_ratios(small, large[:1])
