"""The checkout comparison's output check (benchmarks/compare_checkouts.py): files are matched across the two sides
by their path without the run folder's timestamp, and CSV files are compared without their wall-clock columns."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.compare_checkouts import Checkout, Timing, fingerprints, median_line


def _write(root: Path, run: str, name: str, text: str) -> None:
    path = root / "distserve_placement" / run / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_outputs_match_across_timestamps_and_wall_clock_columns(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, "2026-12-04_10-00-00", "study.csv", "variant,sim_wall_s,rate\nx,1.5,2.0\n")
    _write(b, "2026-12-04_11-30-00", "study.csv", "variant,sim_wall_s,rate\nx,9.9,2.0\n")
    _write(a, "2026-12-04_10-00-00", "notes.txt", "not an output we compare")
    assert fingerprints(a) == fingerprints(b) and list(fingerprints(a)) == ["distserve_placement/study.csv"]
    _write(b, "2026-12-04_11-30-00", "study.csv", "variant,sim_wall_s,rate\nx,9.9,2.5\n")
    assert fingerprints(a) != fingerprints(b)


def test_the_median_line_gives_the_ratio_of_the_medians_and_each_repeats_own() -> None:
    ref = [Timing(10.0, 10.0), Timing(12.0, 12.0), Timing(11.0, 11.0)]
    var = [Timing(5.0, 5.0), Timing(8.0, 8.0), Timing(5.5, 5.5)]
    line = median_line("wall s", ref, var, lambda t: t.wall_s)
    assert "reference     11.00" in line and "variant      5.50" in line and "2.00x" in line
    assert "repeat by repeat 1.50x to 2.00x" in line


def test_a_side_takes_its_environment_as_key_value_pairs_and_refuses_anything_else(tmp_path: Path) -> None:
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "__main__.py").write_text("", encoding="utf-8")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").write_text("", encoding="utf-8")
    side = Checkout.at(str(tmp_path), ["DISAGG_SIM_NATIVE=0", "A=b=c"])
    assert side.env == (("DISAGG_SIM_NATIVE", "0"), ("A", "b=c"))
    with pytest.raises(SystemExit, match="expected KEY=VALUE, got 'DISAGG_SIM_NATIVE'"):
        Checkout.at(str(tmp_path), ["DISAGG_SIM_NATIVE"])


def test_two_runs_of_one_experiment_are_both_compared_in_time_order(tmp_path: Path) -> None:
    for side, stamps in (("a", ("2026-12-04_10-00-00", "2026-12-04_10-05-00")),
                         ("b", ("2026-12-05_09-00-00", "2026-12-05_09-01-00"))):
        for stamp, text in zip(stamps, ("x\n1\n", "x\n2\n"), strict=True):
            _write(tmp_path / side, stamp, "study.csv", text)
    a, b = fingerprints(tmp_path / "a"), fingerprints(tmp_path / "b")
    assert list(a) == ["distserve_placement/study.csv", "distserve_placement/study.csv #2"] and a == b


def test_reproduce_full_reads_each_presets_time_from_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import benchmarks.compare_checkouts as cc

    def fake_run(checkout, args, log):
        assert args[:3] == ["-m", "harness.reproduce", "--full"] and args[4] == "a,b"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("running 2 experiments\n      b done in 300 s\n      a FAILED (exit 1) in 3 s\n"
                       "      a done in 12 s\n", encoding="utf-8")
        return Timing(320.0, 600.0), ""

    monkeypatch.setattr(cc, "simulator_presets_of", lambda checkout: ["a", "b"])
    monkeypatch.setattr(cc, "run_timed", fake_run)
    timing = cc.task_reproduce_full(None, tmp_path)  # type: ignore[arg-type]
    assert timing.wall_s == 320.0 and timing.detail == {"b": 300.0, "a": 12.0}
