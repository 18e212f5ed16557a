"""``python -m harness.reproduce``'s experiment sets: the default set leaves the paper-scale presets to
``--full``, ``--only`` names any preset, and every listed experiment has a preset file."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import reproduce
from harness.reproduce import Experiment, chosen_experiments

PRESETS = Path(__file__).resolve().parents[2] / "conf" / "experiment"


def test_every_listed_experiment_has_a_preset() -> None:
    missing = [e.name for e in reproduce.EXPERIMENTS if not (PRESETS / f"{e.name}.yaml").is_file()]
    assert not missing


def test_full_only_presets_run_with_full_or_when_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reproduce, "EXPERIMENTS", (Experiment("a", "small", 1.0),
                                                   Experiment("b", "paper scale", 30.0, full_only=True)))
    assert [e.name for e in chosen_experiments("", full=False)] == ["a"]
    assert [e.name for e in chosen_experiments("", full=True)] == ["a", "b"]
    assert [e.name for e in chosen_experiments("b", full=False)] == ["b"]


def test_unknown_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown experiment.*nope.*known: mooncake_cache_hit"):
        chosen_experiments("mooncake_scheduling,nope", full=False)


def test_default_set_fits_make_run_budget() -> None:
    default = chosen_experiments("", full=False)
    assert sum(e.minutes for e in default) <= 15.0, [(e.name, e.minutes) for e in default]


def test_simulator_presets_run_side_by_side_longest_first_and_real_ones_alone_after(monkeypatch, tmp_path) -> None:
    experiments = (Experiment("short", "s", 0.1), Experiment("real", "r", 5.0, real=True),
                   Experiment("long", "l", 2.0), Experiment("broken", "b", 1.0))
    monkeypatch.setattr(reproduce, "EXPERIMENTS", experiments)
    started: list[tuple[str, bool]] = []

    def fake_run(experiment, results_dir, overrides, log_file=None):
        started.append((experiment.name, log_file is not None))
        if log_file is not None:
            assert log_file == tmp_path / reproduce.LOGS_DIR / f"{experiment.name}.log"
        return (3 if experiment.name == "broken" else 0), 0.0

    monkeypatch.setattr(reproduce, "run_one", fake_run)
    monkeypatch.setattr(reproduce.subprocess, "run", lambda *a, **k: type("P", (), {"returncode": 0})())
    code = reproduce.main(["--results-dir", str(tmp_path), "--jobs", "1"])
    assert code == 1  # "broken" failed
    # one at a time: the listed order, on the console; the real preset last, alone
    assert started == [("short", False), ("long", False), ("broken", False), ("real", False)]
    started.clear()
    assert reproduce.main(["--results-dir", str(tmp_path), "--jobs", "2"]) == 1
    sims = [name for name, _ in started[:3]]
    assert set(sims) == {"short", "long", "broken"} and all(to_file for _, to_file in started[:3])
    assert started[3] == ("real", False)  # after every simulator preset finished, on the console


def test_side_by_side_submits_the_longest_first(monkeypatch, tmp_path) -> None:
    order: list[str] = []
    monkeypatch.setattr(reproduce, "run_one", lambda e, *a, **k: (order.append(e.name), (0, 0.0))[1])
    experiments = [Experiment("a", "", 0.5), Experiment("b", "", 3.0), Experiment("c", "", 1.0)]
    failed = reproduce.run_side_by_side(experiments, 1, str(tmp_path), [], {"a": 1, "b": 2, "c": 3}, 3)
    assert failed == [] and order == ["a", "b", "c"]  # one at a time: as listed
    monkeypatch.setattr(reproduce, "ThreadPoolExecutor", _InlinePool)  # submit order is run order
    order.clear()
    reproduce.run_side_by_side(experiments, 2, str(tmp_path), [], {"a": 1, "b": 2, "c": 3}, 3)
    assert order == ["b", "c", "a"]


def test_jobs_must_be_positive(tmp_path) -> None:
    with pytest.raises(SystemExit):
        reproduce.main(["--results-dir", str(tmp_path), "--jobs", "0"])


def test_every_real_process_preset_is_marked_real() -> None:
    real = {e.name for e in reproduce.EXPERIMENTS if e.real}
    assert real == {"disagg_cpu", "calibrate_cpu", "sim_vs_real_cpu", "mechanisms_cpu"}


class _InlinePool:
    """A ThreadPoolExecutor stand-in that runs each task when submitted (for a deterministic order)."""

    def __init__(self, max_workers: int) -> None:
        self.max_workers = max_workers

    def __enter__(self) -> _InlinePool:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def submit(self, fn, *args, **kwargs):
        from concurrent.futures import Future

        future: Future = Future()
        future.set_result(fn(*args, **kwargs))
        return future


def test_a_launcher_among_the_overrides_is_found_and_kept_from_the_local_presets() -> None:
    assert reproduce.launcher_choice(["seed=1"]) == ""
    assert reproduce.launcher_choice(["hydra/launcher=basic"]) == ""
    assert reproduce.launcher_choice(["hydra/launcher=slurm", "hydra.launcher.partition=cpu"]) == "slurm"
    assert reproduce.local_overrides(["hydra/launcher=ray_cluster", "hydra.launcher.ray.remote.num_cpus=2",
                                      "seed=1"]) == ["seed=1"]


def test_presets_on_a_launcher_are_one_sweep_and_its_failures_are_named(monkeypatch, tmp_path) -> None:
    experiments = (Experiment("a", "a", 0.1), Experiment("b", "b", 3.0))
    calls = []

    def fake_run(cmd, check):
        calls.append(cmd)
        sweep_dir = Path(next(a for a in cmd if a.startswith("hydra.sweep.dir=")).split("=", 1)[1])
        sweep_dir.mkdir(parents=True)
        (sweep_dir / "sweep.csv").write_text("folder,status,experiment\nexperiment=b,ok,b\nexperiment=a,failed,a\n")
        return SimpleNamespace(returncode=1)

    monkeypatch.setattr(reproduce.subprocess, "run", fake_run)
    failed = reproduce.run_on_launcher(experiments, "ray_cluster", str(tmp_path), ["hydra/launcher=ray_cluster"])
    assert failed == ["a"]
    (cmd,) = calls
    assert cmd[cmd.index("--multirun") + 1] == "experiment=b,a"  # longest first
    assert "hydra/launcher=ray_cluster" in cmd and f"results_dir={tmp_path}" in cmd
    assert next(a for a in cmd if a.startswith("hydra.sweep.dir=")).startswith(f"hydra.sweep.dir={tmp_path}/reproduce/")


def test_a_sweep_that_wrote_no_table_fails_every_preset(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(reproduce.subprocess, "run", lambda cmd, check: SimpleNamespace(returncode=2))
    experiments = (Experiment("a", "a", 0.1), Experiment("b", "b", 3.0))
    assert reproduce.run_on_launcher(experiments, "slurm", str(tmp_path), []) == ["a", "b"]
