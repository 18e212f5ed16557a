"""A simulator run's process imports only what it uses: no real-engine, tracking or model packages, no pandas, and the
job runners and figures it does not draw are imported by name when needed (harness/app.py, figures/render.py,
figures/style.py, harness/prompts.py); importing the suite sets its allocation defaults (harness/__init__.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import matplotlib
import pytest

from figures.render import FIGURES_BY_KIND, plots_for
from harness.app import JOB_RUNNERS
from harness.jobs import LazyRunner

ROOT = Path(__file__).resolve().parents[2]
# packages a simulator-only run must never import (each costs from a tenth of a second to several seconds)
HEAVY = ("vllm", "torch", "wandb", "transformers", "numba", "seaborn", "sglang", "pandas")
# the suite's real-engine, calibration and study code, and what only they need
NOT_IN_A_SIM_RUN = ("harness.load_driver", "harness.loadgen", "harness.calibrate", "harness.studies",
                    "systems.deployments", "systems.kvcache", "figures.cache_hit", "figures.sim_studies")

# runs `python -m harness ARGS` in this interpreter, then writes the names of the imported modules to OUT
CHILD = """
import atexit, json, runpy, sys
out, args = sys.argv[1], sys.argv[2:]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv = ["harness", *args]
runpy.run_module("harness", run_name="__main__", alter_sys=True)
"""


def test_a_simulator_run_imports_no_heavy_package(tmp_path):
    out = tmp_path / "modules.json"
    results = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(out), "engine=sim", "workload.max_requests=20", "engine.progress=false",
         f"results_dir={results}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    modules = set(json.loads(out.read_text(encoding="utf-8")))
    summary = json.loads(next(results.rglob("summary.json")).read_text(encoding="utf-8"))
    assert summary["status"] == "ok" and summary["metrics"]["n_ok"] == 20
    assert "figure_latency_vs_rate" in summary["files"]  # the figure was drawn, without seaborn
    assert {"harness.serve_job", "systems.sim.simulation"} <= modules  # the child did run
    # the figure process drew the figure (harness/figure_worker.py): the job's process never imports matplotlib
    assert sorted(m for m in modules if m.split(".")[0] == "matplotlib" or m == "figures.serving") == []
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY)
    assert heavy == []  # pandas too: the tables are written with pyarrow and csv (harness/tables.py)
    unused = sorted(m for m in modules if m.startswith(NOT_IN_A_SIM_RUN))
    assert unused == []


@pytest.mark.parametrize("kind", sorted(JOB_RUNNERS))
def test_every_job_runner_names_a_function_of_its_module(kind):
    runner = JOB_RUNNERS[kind]
    assert isinstance(runner, LazyRunner)
    function = runner.resolve()
    assert callable(function) and function.__name__ == runner.name
    assert function.__module__ == runner.module


def test_a_lazy_runner_calls_its_function_with_the_arguments():
    runner = LazyRunner("os.path", "join")
    assert runner("a", "b") == "a/b"
    with pytest.raises(ModuleNotFoundError):
        LazyRunner("harness.no_such_module", "run")()


@pytest.mark.parametrize("kind", sorted(FIGURES_BY_KIND))
def test_every_figure_of_a_kind_is_found(kind, tmp_path):
    plots = plots_for(tmp_path, kind)
    assert [f"{p.__module__}:{p.__name__}" for p in plots] == list(FIGURES_BY_KIND[kind])


def test_the_theme_is_what_seaborn_sets():
    import matplotlib.colors as mcolors
    import seaborn as sns

    from figures.style import apply_theme

    with matplotlib.rc_context():
        matplotlib.rcParams.update({"lines.linewidth": 7.0, "axes.grid": False})  # anything set before is replaced
        sns.set_theme(context="paper", style="whitegrid", palette="colorblind")
        expected = dict(matplotlib.rcParams)
        expected_codes = {code: mcolors.to_rgb(code) for code in "bgrmyck"}
        mcolors.colorConverter.colors.update({code: (0.0, 0.0, 0.0) for code in "bgrmyck"})
        matplotlib.rcParams.update({"lines.linewidth": 7.0, "axes.grid": False})
        apply_theme()
        assert dict(matplotlib.rcParams) == expected  # seaborn is imported here, so its colormap is set too
        assert {code: mcolors.to_rgb(code) for code in "bgrmyck"} == expected_codes
    sns.set_color_codes("reset")  # leave the single-letter colours as matplotlib has them


@pytest.mark.parametrize(("preset", "expected"), [({}, ["0", "system"]), (
    {"NUMPY_MADVISE_HUGEPAGE": "1", "ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}, ["1", "mimalloc"])])
def test_importing_the_suite_sets_allocation_defaults_the_user_has_not(preset, expected):
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("NUMPY_MADVISE_HUGEPAGE", "ARROW_DEFAULT_MEMORY_POOL")}
    code = ("import harness, os, sys; assert 'numpy' not in sys.modules; "
            "print(os.environ['NUMPY_MADVISE_HUGEPAGE'], os.environ['ARROW_DEFAULT_MEMORY_POOL'])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**env, **preset}, capture_output=True,
                         text=True, check=True, timeout=120)
    assert out.stdout.split() == expected
