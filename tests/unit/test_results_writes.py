"""Durable, honest writes: result files are fsynced (file, then folder) before and after ``os.replace``,
figures are written atomically, and a tracker that cannot publish a finished job leaves ``failed`` in its
summary with a non-zero exit status (harness/results.py, figures/style.py, harness/app.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from figures.style import save_figure
from harness.results import RunFolder

ROOT = Path(__file__).resolve().parents[2]


def test_result_files_are_fsynced_then_their_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:  # the real fsync runs; we only note what it was given
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    folder = RunFolder(tmp_path / "job")
    folder.write_table("points.csv", pd.DataFrame({"a": [1, 2]}))
    folder.write_json("summary.json", {"status": "ok"})
    job = str(folder.path.resolve())
    assert Path(synced[0]).name.startswith(".points.csv.")  # the temporary file ...
    assert synced[1] == job  # ... then the folder holding its new name
    assert Path(synced[2]).name.startswith(".summary.json.") and synced[3] == job
    assert sorted(p.name for p in folder.path.iterdir()) == ["points.csv", "summary.json"]  # no temporary left


def test_figure_and_its_data_are_written_atomically(tmp_path: Path) -> None:
    data = pd.DataFrame({"x": [1, 2], "y": [3, 4]})
    fig, ax = plt.subplots()
    ax.plot(data.x, data.y)
    png, csv = save_figure(fig, data, tmp_path, "curve")
    assert png.read_bytes().startswith(b"\x89PNG") and pd.read_csv(csv).equals(data)
    old_png = png.read_bytes()

    broken, ax = plt.subplots()
    ax.set_title(r"$\frac{$")  # mathtext that cannot be drawn: savefig raises while writing
    with pytest.raises(ValueError):
        save_figure(broken, data.assign(y=[5, 6]), tmp_path, "curve")
    assert png.read_bytes() == old_png  # the previous figure is intact, not truncated
    assert pd.read_csv(csv).equals(data)  # nor is its data replaced by the failed figure's
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == ["curve.csv", "curve.png"]


@pytest.mark.integration
def test_publish_failure_after_an_ok_job_is_recorded(tmp_path: Path) -> None:
    """A W&B that cannot be used (here its import fails) after the results are written: the summary says
    ``failed`` with the publish reason but keeps the metrics and files, and the exit status is non-zero."""
    shim = tmp_path / "shim" / "wandb"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('wandb is broken in this test')\n")
    folder = tmp_path / "job"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim.parent), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "harness", "job=workload", "logger=wandb", "logger.mode=offline",
           f"hydra.run.dir={folder}"]
    err = tmp_path / "stderr.txt"
    with err.open("wb") as stderr:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    assert code != 0
    assert summary["status"] == "failed"
    assert summary["reason"].startswith("publish to wandb failed: RuntimeError: logger=wandb needs the wandb extra")
    assert "results in this folder are complete" in summary["reason"]
    assert summary["metrics"]["n_requests"] > 0 and summary["files"]["workload"] == "workload.parquet"
    assert (folder / "workload.parquet").exists()
