"""No silent overwrite: a job refuses a folder that holds a run's results (exit 2, one line naming the folder
and ``overwrite=true``, nothing touched); with ``overwrite=true`` the old results go first and nothing stale
is left; multirun job folders still work (harness/folder_guard.py, harness/hydra_checks.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.folder_guard import FolderInUse, guard_folder, previous_results
from systems.compiled_core import FALLBACK_WARNING

ROOT = Path(__file__).resolve().parents[2]


def run_harness(args: list[str], tmp_path: Path, name: str) -> tuple[int, str]:
    """``python -m harness <args>`` in its own process group; (exit status, stderr)."""
    err = tmp_path / f"{name}.stderr"
    with err.open("wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=stderr, start_new_session=True)
        try:
            code = proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return code, err.read_text()


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _old_run(folder: Path) -> None:
    (folder / "figures").mkdir(parents=True)
    (folder / "figures" / "latency_vs_rate.png").write_bytes(b"png")
    (folder / "requests.parquet").write_bytes(b"parquet")
    (folder / "custom_table.csv").write_text("a\n1\n")
    (folder / "harness.log").write_text("old log\n")
    (folder / ".hydra").mkdir()
    (folder / ".hydra" / "config.yaml").write_text("old: 1\n")
    (folder / "notes.txt").write_text("mine\n")
    files = {"config": "config.yaml", "table": "custom_table.csv", "outside": "../elsewhere.txt",
             "figure_latency_vs_rate": "figures/latency_vs_rate.png"}
    (folder / "summary.json").write_text(json.dumps({"status": "ok", "files": files}))
    (folder.parent / "elsewhere.txt").write_text("not the job's\n")


def test_previous_results_are_the_listed_and_known_files_inside_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    _old_run(folder)
    names = {p.relative_to(folder).as_posix() for p in previous_results(folder)}
    assert names == {"summary.json", "figures", "requests.parquet", "custom_table.csv", "harness.log", ".hydra"}
    during_the_run = {p.relative_to(folder).as_posix() for p in previous_results(folder, include_run_files=False)}
    assert during_the_run == names - {"harness.log", ".hydra"}
    assert previous_results(tmp_path / "missing") == []


def test_guard_refuses_then_clears_with_overwrite(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    _old_run(folder)
    before = snapshot(folder)
    with pytest.raises(FolderInUse, match="overwrite=true") as refused:
        guard_folder(folder, overwrite=False)
    assert str(folder) in str(refused.value)
    assert snapshot(folder) == before
    guard_folder(folder, overwrite=True, include_run_files=False)
    assert sorted(p.name for p in folder.iterdir()) == [".hydra", "harness.log", "notes.txt"]
    assert (tmp_path / "elsewhere.txt").exists()  # listed with ../ : not the job's, never removed
    assert guard_folder(folder, overwrite=False, include_run_files=False) == []  # a fresh run's own files pass


def test_run_job_refuses_before_writing(tmp_path: Path) -> None:
    from harness.app import JobContext, run_job
    from harness.config import compose_config
    from harness.results import RunFolder

    folder = tmp_path / "job"
    _old_run(folder)
    before = snapshot(folder)
    ctx = JobContext(folder=RunFolder(folder), experiment="e", job="job", choices={}, overrides=["job=workload"])
    with pytest.raises(FolderInUse):
        run_job(compose_config(["job=workload"]), ctx)
    assert snapshot(folder) == before


@pytest.mark.integration
def test_rerun_into_the_same_folder(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    code, err = run_harness(["job=serve", f"hydra.run.dir={folder}"], tmp_path, "first")
    assert code == 0, err
    (folder / "notes.txt").write_text("mine\n")
    first = snapshot(folder)
    assert {"requests.parquet", "points.csv", "load.csv", "figures/latency_vs_rate.png"} <= set(first)

    code, err = run_harness(["job=workload", f"hydra.run.dir={folder}"], tmp_path, "refused")
    assert code == 2
    lines = [line for line in err.strip().splitlines() if FALLBACK_WARNING not in line]
    assert len(lines) == 1 and str(folder) in lines[0] and "overwrite=true" in lines[0], err
    assert snapshot(folder) == first  # not even Hydra's log or .hydra/ copies were touched

    code, err = run_harness(["job=workload", "overwrite=true", f"hydra.run.dir={folder}"], tmp_path, "overwrite")
    assert code == 0, err
    after = snapshot(folder)
    summary = json.loads(after["summary.json"])
    assert summary["status"] == "ok" and summary["kind"] == "workload"
    stale = [name for name in after if name.startswith("figures/") or name in ("requests.parquet", "points.csv",
                                                                                "load.csv")]
    assert stale == []
    assert after["notes.txt"] == b"mine\n"
    assert b"points.csv" in first["harness.log"]
    assert b"points.csv" not in after["harness.log"]  # the serve run's log is gone, not appended to
    assert b"overwrite=true" in after[".hydra/overrides.yaml"]


@pytest.mark.integration
def test_multirun_jobs_get_folders_named_by_the_swept_key(tmp_path: Path) -> None:
    code, err = run_harness(["-m", "job=workload", f"results_dir={tmp_path / 'results'}", "seed=0,1"], tmp_path, "multi")
    assert code == 0, err
    summaries = sorted((tmp_path / "results" / "default").glob("*/summary.json"))
    assert [p.parent.name for p in summaries] == ["seed=0", "seed=1"]
    assert [json.loads(p.read_text())["status"] for p in summaries] == ["ok", "ok"]
