"""``python -m harness.reproduce``'s experiment sets: the default set leaves the paper-scale presets to
``--full``, ``--only`` names any preset, and every listed experiment has a preset file."""

from __future__ import annotations

from pathlib import Path

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
