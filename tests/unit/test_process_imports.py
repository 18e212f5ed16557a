"""A simulator run's process imports only what it uses: no real-engine, tracking or model packages, and the job
runners and figures of other kinds of jobs only when they run (harness/app.py, figures/render.py,
harness/prompts.py); importing the suite sets its allocation defaults (harness/__init__.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from figures.render import FIGURES_BY_KIND, plots_for
from harness.app import JOB_RUNNERS

ROOT = Path(__file__).resolve().parents[2]
# packages a simulator-only run must never import (each costs from a tenth of a second to several seconds)
HEAVY = ("vllm", "torch", "wandb", "transformers", "numba", "sglang", "aiohttp")
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


@pytest.mark.integration
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
    assert "figure_latency_vs_rate" in summary["files"]
    assert {"harness.serve_job", "systems.sim.simulated_deployment", "figures.serving"} <= modules  # the child did run
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY)
    assert heavy == []
    unused = sorted(m for m in modules if m.startswith(NOT_IN_A_SIM_RUN))
    assert unused == []


def test_every_kind_of_job_has_a_runner_and_figures():
    from harness.config import JOBS

    assert set(JOB_RUNNERS) == set(JOBS) == set(FIGURES_BY_KIND)


@pytest.mark.parametrize("kind", sorted(set(FIGURES_BY_KIND) - {"sim_study", "workload"}))
def test_every_kind_with_figures_finds_them(kind, tmp_path):
    plots = plots_for(tmp_path, kind)
    assert plots and all(callable(p) and p.__module__.startswith("figures.") for p in plots)


@pytest.mark.parametrize(("preset", "expected"), [({}, ["0", "system"]), (
    {"NUMPY_MADVISE_HUGEPAGE": "1", "ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}, ["1", "mimalloc"])])
@pytest.mark.integration
def test_importing_the_suite_sets_allocation_defaults_the_user_has_not(preset, expected):
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("NUMPY_MADVISE_HUGEPAGE", "ARROW_DEFAULT_MEMORY_POOL")}
    code = ("import harness, os, sys; assert 'numpy' not in sys.modules; "
            "print(os.environ['NUMPY_MADVISE_HUGEPAGE'], os.environ['ARROW_DEFAULT_MEMORY_POOL'])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**env, **preset}, capture_output=True,
                         text=True, check=True, timeout=120)
    assert out.stdout.split() == expected
