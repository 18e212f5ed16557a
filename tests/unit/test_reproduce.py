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
