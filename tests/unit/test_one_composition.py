"""A single run composes its config once (harness/one_composition.py, harness/__main__.py), and the config it
keeps is the one Hydra's second composition gave; multiruns, sweep overrides and errors take Hydra's own path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.hydra import Hydra
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException
from hydra.types import RunMode
from omegaconf import OmegaConf

from harness import one_composition
from harness.config import register_configs
from systems.config import CONF_DIR

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["engine=sim", "workload.max_requests=20", "engine.progress=false", "figures=false"]

# runs `python -m harness ARGS` in this interpreter, counting the compositions, then writes the count to OUT
CHILD = """
import atexit, json, runpy, sys
from hydra._internal.config_loader_impl import ConfigLoaderImpl
out, args = sys.argv[1], sys.argv[2:]
calls = []
compose = ConfigLoaderImpl.load_configuration
def counted(self, *a, **k):
    calls.append(str(k.get("run_mode")))
    return compose(self, *a, **k)
ConfigLoaderImpl.load_configuration = counted
atexit.register(lambda: open(out, "w").write(json.dumps(calls)))
sys.argv = ["harness", *args]
runpy.run_module("harness", run_name="__main__", alter_sys=True)
"""


def run_child(tmp_path: Path, args: list[str]) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    out = tmp_path / "calls.json"
    proc = subprocess.run([sys.executable, "-c", CHILD, str(out), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=False)
    return proc, json.loads(out.read_text(encoding="utf-8")) if out.is_file() else []


@pytest.fixture
def hydra_app(monkeypatch):
    """Hydra's app object over conf/, with get_mode patched for this test only, and a count of compositions."""
    monkeypatch.setattr(Hydra, "get_mode", Hydra.get_mode)  # restored after the test
    calls: list[RunMode] = []
    compose = ConfigLoaderImpl.load_configuration

    def counted(self, *args, **kwargs):
        calls.append(kwargs["run_mode"])
        return compose(self, *args, **kwargs)

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", counted)
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        app = GlobalHydra.instance().hydra
        assert app is not None
        yield app, calls


def test_a_single_run_composes_once_and_runs(tmp_path):
    proc, calls = run_child(tmp_path, [*SMALL, f"hydra.run.dir={tmp_path / 'job'}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert calls == ["RunMode.RUN"]  # Hydra alone: once as a multirun (for the mode), once for the run
    summary = json.loads((tmp_path / "job" / "summary.json").read_text(encoding="utf-8"))
    assert summary["status"] == "ok" and summary["metrics"]["n_ok"] == 20
    hydra_yaml = OmegaConf.load(tmp_path / "job" / ".hydra" / "hydra.yaml")
    assert hydra_yaml.hydra.mode == "RUN" and list(hydra_yaml.hydra.overrides.hydra)[-1] == "hydra.mode=RUN"


def test_a_multirun_still_runs_every_job(tmp_path):
    proc, calls = run_child(tmp_path, ["--multirun", *SMALL, "workload.max_requests=10,20",
                                       f"results_dir={tmp_path / 'results'}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    summaries = [json.loads(p.read_text(encoding="utf-8")) for p in (tmp_path / "results").rglob("summary.json")]
    assert sorted(s["metrics"]["n_ok"] for s in summaries) == [10, 20]
    assert all(s["status"] == "ok" for s in summaries)
    assert "RunMode.MULTIRUN" in calls


def test_the_kept_config_is_what_the_run_composed_before(hydra_app):
    app, calls = hydra_app
    overrides = [*SMALL, "workload=azure_conv", "model=llama2_70b"]
    before = app.compose_config("config", [*overrides, one_composition.RUN_OVERRIDE], run_mode=RunMode.RUN)
    one_composition.install()
    calls.clear()
    assert app.get_mode(config_name="config", overrides=list(overrides)) is None
    after = app.compose_config("config", [*overrides, one_composition.RUN_OVERRIDE], run_mode=RunMode.RUN)
    assert calls == [RunMode.RUN]  # the run's composition was answered with get_mode's
    assert OmegaConf.to_yaml(after) == OmegaConf.to_yaml(before)
    assert after.hydra.mode == RunMode.RUN
    assert "load_configuration" not in vars(app.config_loader)  # only the next composition is answered
    again = app.compose_config("config", [*overrides, one_composition.RUN_OVERRIDE], run_mode=RunMode.RUN)
    assert calls == [RunMode.RUN, RunMode.RUN] and again is not after


def test_another_composition_after_get_mode_is_composed_as_asked(hydra_app):
    app, calls = hydra_app
    one_composition.install()
    assert app.get_mode(config_name="config", overrides=list(SMALL)) is None
    cfg = app.compose_config("config", [*SMALL, "hydra.mode=MULTIRUN"], run_mode=RunMode.MULTIRUN)
    assert cfg.hydra.mode == RunMode.MULTIRUN  # what --multirun composes: not the kept run config
    assert calls == [RunMode.RUN, RunMode.MULTIRUN]
    assert "load_configuration" not in vars(app.config_loader)


def test_a_mode_set_in_the_config_is_read(hydra_app):
    app, _ = hydra_app
    one_composition.install()
    assert app.get_mode(config_name="config", overrides=[*SMALL, "hydra.mode=MULTIRUN"]) == RunMode.MULTIRUN
    assert "load_configuration" not in vars(app.config_loader)  # nothing kept for a multirun


def test_a_sweep_override_without_multirun_fails_as_hydra_makes_it(hydra_app):
    app, calls = hydra_app
    one_composition.install()
    overrides = [*SMALL, "workload.max_requests=10,20"]
    assert app.get_mode(config_name="config", overrides=list(overrides)) is None  # Hydra's own get_mode answered
    assert calls == [RunMode.RUN, RunMode.MULTIRUN]
    with pytest.raises(ConfigCompositionException, match="Ambiguous value for argument"):
        app.compose_config("config", [*overrides, one_composition.RUN_OVERRIDE], run_mode=RunMode.RUN)


def test_install_is_idempotent(monkeypatch):
    monkeypatch.setattr(Hydra, "get_mode", Hydra.get_mode)
    one_composition.install()
    patched = Hydra.get_mode
    one_composition.install()
    assert Hydra.get_mode is patched
