"""``figures=false`` (conf/config.yaml, harness/config.py, harness/app.py): a run writes its tables and summary
but draws no figure and never imports matplotlib; the default draws them; ``python -m figures`` draws them
later from the tables."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vocab.errors import ConfigError
from vocab.result_files import FIGURES_DIR, POINTS_FILE, REQUESTS_FILE

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["engine=sim", "workload.max_requests=20", "engine.progress=false"]

# runs `python -m harness ARGS` in this interpreter, then writes the names of the imported modules to OUT
CHILD = """
import atexit, json, runpy, sys
out, args = sys.argv[1], sys.argv[2:]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv = ["harness", *args]
runpy.run_module("harness", run_name="__main__", alter_sys=True)
"""


def test_the_default_draws_figures(compose):
    assert compose([]).figures is True
    assert compose(["figures=false"]).figures is False


def test_a_value_that_is_not_a_boolean_is_refused_naming_the_key(compose):
    with pytest.raises(ConfigError, match="figures"):
        compose(["figures=sometimes"])


@pytest.mark.integration
def test_figures_false_writes_the_tables_and_no_figure(tmp_path):
    job = tmp_path / "job"
    out = tmp_path / "modules.json"
    proc = subprocess.run([sys.executable, "-c", CHILD, str(out), *SMALL, "figures=false", f"hydra.run.dir={job}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((job / "summary.json").read_text(encoding="utf-8"))
    assert summary["status"] == "ok" and summary["metrics"]["n_ok"] == 20
    assert (job / REQUESTS_FILE).is_file() and (job / POINTS_FILE).is_file()
    assert not (job / FIGURES_DIR).exists()
    assert not [name for name in summary["files"] if name.startswith("figure_")]
    modules = set(json.loads(out.read_text(encoding="utf-8")))
    assert "harness.serve_job" in modules  # the child did run the job
    assert not [m for m in modules if m.split(".")[0] == "matplotlib" or m.startswith("figures.")]
    # the figures can be drawn afterwards from the tables
    redraw = subprocess.run([sys.executable, "-m", "figures", "--results-dir", str(tmp_path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=600, check=False)
    assert redraw.returncode == 0, redraw.stderr[-3000:]
    assert (job / FIGURES_DIR / "latency_vs_rate.png").is_file()
