"""Sweep pieces without a sweep: folder names, config hashes, resume states, the sweep table and its figures
(harness/sweep/, figures/sweep.py). The sweeps themselves run in tests/integration/test_sweep_resume.py."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from figures.sweep import SweepFigureError, default_sweep_figures, plot_sweep
from figures.sweep import main as sweep_figure_main
from harness.sweep.config_hash import config_hash
from harness.sweep.naming import DEFAULT_NAME, MAX_NAME, job_dirname
from harness.sweep.plan import PlannedJob, expand
from harness.sweep.resume import JobState, folder_state
from harness.sweep.table import count_failures, flatten, sweep_table


def test_job_dirname_is_the_overrides_made_safe() -> None:
    assert job_dirname("system=mooncake,workload.arrival.rate_rps=4") == "system=mooncake,workload.arrival.rate_rps=4"
    assert job_dirname("") == DEFAULT_NAME
    assert job_dirname("engine.profile=results/a b/profile.json") == "engine.profile=results_a_b_profile.json"
    assert "/" not in job_dirname("x=../../etc") and job_dirname("x=../../etc") != ".."


def test_job_dirname_hides_secrets() -> None:
    name = job_dirname("engine.url=http://user:PASSWORD@127.0.0.1:9,seed=1")
    assert "PASSWORD" not in name and "seed=1" in name


def test_long_job_dirnames_are_bounded_and_stay_distinct() -> None:
    a, b = "k=" + "x" * 300 + "1", "k=" + "x" * 300 + "2"
    assert len(job_dirname(a)) <= MAX_NAME and len(job_dirname(b)) <= MAX_NAME
    assert job_dirname(a) != job_dirname(b)
    assert job_dirname(a) == job_dirname(a)


def test_the_resolver_names_a_folder_through_omegaconf() -> None:
    cfg = OmegaConf.create({"d": "system=a,seed=1", "sub": "${job_dirname:${d}}"})
    assert cfg.sub == "system=a,seed=1"


def test_config_hash_ignores_presentation_and_sees_results() -> None:
    base = {"seed": 0, "system": {"name": "mooncake"}, "engine": {"progress": True, "name": "sim"},
            "results_dir": "a", "overwrite": False, "logger": {"name": "none"}}
    same = {"logger": {"name": "wandb", "group": "g"}, "overwrite": True, "results_dir": "b", "seed": 0,
            "engine": {"name": "sim", "progress": False}, "system": {"name": "mooncake"}}
    assert config_hash(base) == config_hash(same)
    assert config_hash(base) != config_hash({**base, "seed": 1})
    assert config_hash(base) != config_hash({**base, "engine": {"name": "vllm", "progress": True}})
    assert config_hash(base).startswith("sha256:")


def _summary(folder: Path, **fields: object) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(fields))


@pytest.mark.parametrize(("fields", "state"), [
    (None, JobState.MISSING),
    ({"status": "ok", "config_hash": "h"}, JobState.DONE),
    ({"status": "ok", "config_hash": "other"}, JobState.CONFLICT),
    ({"status": "ok"}, JobState.CONFLICT),
    ({"status": "failed", "config_hash": "h"}, JobState.FAILED),
    ({"status": "running", "config_hash": "h"}, JobState.KILLED),
])
def test_folder_state(tmp_path: Path, fields: dict | None, state: JobState) -> None:
    if fields is not None:
        _summary(tmp_path / "job", **fields)
    got = folder_state(tmp_path / "job", "h")
    assert got.state is state
    assert got.skip == (state is JobState.DONE)


def test_a_garbled_summary_counts_as_missing(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text("{not json")
    assert folder_state(tmp_path, "h").state is JobState.MISSING


def test_expand_is_hydras_cartesian_product_in_order() -> None:
    jobs = expand(["seed=1", "system=a,b", "engine.rate=1,2"])
    assert jobs == [["seed=1", "system=a", "engine.rate=1"], ["seed=1", "system=a", "engine.rate=2"],
                    ["seed=1", "system=b", "engine.rate=1"], ["seed=1", "system=b", "engine.rate=2"]]


def test_flatten_names_nested_scalars() -> None:
    assert flatten({"a": {"b": 1, "c": [2, {"d": None}]}, "e": "x", "f": object()}) == \
        {"a.b": 1, "a.c.0": 2, "a.c.1.d": None, "e": "x"}


def _jobs(tmp_path: Path) -> list[PlannedJob]:
    ok, failed, points = tmp_path / "system=a", tmp_path / "system=b", tmp_path / "system=c"
    _summary(ok, status="ok", config_hash="h1", started_at="2020-01-01T00:00:00+00:00",
             metrics={"p99_ttft_ms": 10.0, "nested": {"x": 1}}, validity={"valid": True})
    _summary(failed, status="failed", reason="ConfigError: bad", config_hash="h2")
    _summary(points, status="ok", config_hash="h3", started_at="2999-01-01T00:00:00+00:00",
             metrics={"points": [{"rate": 1, "p99_ttft_ms": 5.0}, {"rate": 2, "p99_ttft_ms": 7.0}], "n": 3})
    return [PlannedJob(0, ("system=a",), ok), PlannedJob(1, ("system=b",), failed),
            PlannedJob(2, ("system=c",), points), PlannedJob(3, ("system=d",), tmp_path / "system=d")]


def test_sweep_table_joins_overrides_and_metrics(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    table = sweep_table(_jobs(tmp_path), tmp_path, since=datetime(2026, 1, 1, tzinfo=UTC))
    assert list(table.columns[:5]) == ["folder", "status", "resumed", "reason", "config_hash"]
    assert list(table["folder"]) == ["system=a", "system=b", "system=c", "system=c", "system=d"]
    assert list(table["status"]) == ["ok", "failed", "ok", "ok", "missing"]
    assert list(table["system"]) == ["a", "b", "c", "c", "d"]
    assert table.loc[0, "nested.x"] == 1 and bool(table.loc[0, "valid"]) is True
    assert bool(table.loc[0, "resumed"]) is True and bool(table.loc[2, "resumed"]) is False
    assert list(table.loc[2:3, "p99_ttft_ms"]) == [5.0, 7.0] and list(table.loc[2:3, "n"]) == [3, 3]
    assert table.loc[1, "reason"] == "ConfigError: bad"
    assert count_failures(table) == 2  # the failed job and the missing one; job c's two points count once


def test_a_refused_folder_is_not_reported_ok(tmp_path: Path) -> None:
    jobs = _jobs(tmp_path)
    (jobs[0].folder / "refused.txt").write_text("holds the ok results of another config\n")
    table = sweep_table(jobs, tmp_path)
    assert table.loc[0, "status"] == "refused" and "another config" in table.loc[0, "reason"]
    assert count_failures(table) == 3


def _figure_table() -> pd.DataFrame:
    return pd.DataFrame({"folder": [f"j{i}" for i in range(6)], "status": ["ok"] * 5 + ["failed"],
                         "rate": ["1", "2", "3", "1", "2", "3"], "system": ["a", "a", "a", "b", "b", "b"],
                         "p99_ttft_ms": [1.0, 2.0, 4.0, 1.5, 2.5, None]})


def test_plot_sweep_writes_the_figure_and_only_ok_rows(tmp_path: Path) -> None:
    png, csv = plot_sweep(_figure_table(), tmp_path, "p99_ttft_ms", "rate", hue="system")
    assert png.name == "p99_ttft_ms_vs_rate_by_system.png" and png.stat().st_size > 1000
    data = pd.read_csv(csv)
    assert len(data) == 5 and "j5" not in set(data["folder"])
    png2, _ = plot_sweep(_figure_table(), tmp_path, "p99_ttft_ms", "system", facet="rate")  # categorical x: bars
    assert png2.is_file()


def test_plot_sweep_names_a_missing_column(tmp_path: Path) -> None:
    with pytest.raises(SweepFigureError, match="--x nope: not a column"):
        plot_sweep(_figure_table(), tmp_path, "p99_ttft_ms", "nope")


def test_default_figures_use_the_swept_keys(tmp_path: Path) -> None:
    paths = default_sweep_figures(_figure_table(), tmp_path, ["system", "rate"])
    assert [p.name for p in paths] == ["p99_ttft_ms_vs_rate_by_system.png", "p99_ttft_ms_vs_rate_by_system.csv"]
    assert default_sweep_figures(_figure_table(), tmp_path, []) == []


def test_sweep_figure_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sweep_figure_main([str(tmp_path), "--metric", "p99_ttft_ms", "--x", "rate"]) == 2
    assert "no sweep table" in capsys.readouterr().err
    _figure_table().to_csv(tmp_path / "sweep.csv", index=False)
    assert sweep_figure_main([str(tmp_path), "--metric", "p99_ttft_ms", "--x", "rate", "--hue", "system"]) == 0
    assert sweep_figure_main([str(tmp_path), "--metric", "bogus", "--x", "rate"]) == 2
    assert "--metric bogus" in capsys.readouterr().err
