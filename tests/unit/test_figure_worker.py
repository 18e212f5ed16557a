"""A job's figures are drawn by a second process started with the job (harness/figure_worker.py,
figures/render_worker.py): the same files and errors as drawing in the job's process, a process left behind by
a job that failed first is killed by its group, and a process that cannot start leaves the drawing here."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from figures.render import FigureError, render_job
from harness.figure_worker import FigureWorker

POINTS = """point,rate_rps,offered_rate_rps,median_ttft_ms,p99_ttft_ms,median_tpot_ms,p99_tpot_ms,median_itl_ms,\
p99_itl_ms,goodput_rps,valid,validity_reasons
0,1.0,0.99,92.1,431.0,30.8,34.6,30.1,40.2,0.9,True,
1,2.0,1.98,97.0,1000.0,32.7,38.9,31.0,45.0,1.7,False,too short
"""


def _job(root: Path, name: str, points: str = POINTS) -> Path:
    job = root / name
    job.mkdir()
    (job / "points.csv").write_text(points, encoding="utf-8")
    return job


def _gone(pid: int, within_s: float = 30.0) -> bool:
    """True once no process of group ``pid`` is left (a killed child is reaped by the worker's close)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_the_figure_process_draws_what_the_job_process_would(tmp_path):
    here = _job(tmp_path, "here")
    there = _job(tmp_path, "there")
    expected = render_job(here, "serve")
    with FigureWorker("serve") as worker:
        assert worker.start()
        pid = worker._proc.pid  # noqa: SLF001 - the test checks the process is gone afterwards
        written = worker.render(there)
    assert [p.name for p in written] == [p.name for p in expected] == ["latency_vs_rate.png", "latency_vs_rate.csv"]
    for mine, theirs in zip(written, expected, strict=True):
        assert mine.parent == there / "figures"
        assert mine.read_bytes() == theirs.read_bytes()  # the same PNG and CSV bytes
    assert _gone(pid)


def test_a_relative_job_folder_gives_paths_under_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _job(tmp_path, "rel")
    with FigureWorker("serve") as worker:
        assert worker.start()
        written = worker.render(Path("rel"))
    assert written == [Path("rel/figures/latency_vs_rate.png"), Path("rel/figures/latency_vs_rate.csv")]
    assert all(p.is_file() for p in written)


def test_a_figure_that_fails_is_a_figure_error_naming_it(tmp_path):
    job = _job(tmp_path, "bad", POINTS + "2,3.0,2.9,1,2,3,4,5,6,7,True,,surplus,fields\n")
    with FigureWorker("serve") as worker:
        assert worker.start()
        with pytest.raises(FigureError, match=r"1 figure\(s\) failed \(plot_latency_vs_rate: ValueError: .*points.csv"):
            worker.render(job)


def test_a_job_that_fails_before_its_figures_leaves_no_figure_process(tmp_path):
    with pytest.raises(RuntimeError, match="the job failed"), FigureWorker("serve") as worker:
        assert worker.start()
        pid = worker._proc.pid  # noqa: SLF001
        raise RuntimeError("the job failed")
    assert _gone(pid)
    assert not (tmp_path / "figures").exists()


def test_a_process_that_cannot_start_leaves_the_drawing_to_this_one(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    job = _job(tmp_path, "job")
    with FigureWorker("serve") as worker:
        assert not worker.start()
        written = worker.render(job)
    assert "could not start the figure process" in caplog.text
    assert [p.name for p in written] == ["latency_vs_rate.png", "latency_vs_rate.csv"]
    assert all(p.is_file() for p in written)


def test_the_worker_ends_without_drawing_when_told_nothing(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "figures.render_worker", "serve"], input="", capture_output=True,
                          text=True, timeout=300, cwd=Path(__file__).resolve().parents[2], check=False)
    assert proc.returncode == 0 and proc.stdout == ""
