"""The suite's one way to find the highest load that meets an SLO (harness/capacity.py): the adaptive
rate search both studies use (the placement search's geometric form, the Splitwise study's arithmetic
form), and reading a capacity off a measured sweep."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.capacity import capacity_at, search_max_rate

# ---------------------------------------------------------------------------------------------- geometric search

def smooth(threshold: float):
    """A decreasing attainment that crosses 0.9 exactly at ``threshold``."""
    scale = threshold / (1 / 0.9 - 1) ** 0.25
    return lambda r: 1.0 / (1.0 + (r / scale) ** 4)


def attainment_search(f, start, **kw):
    return search_max_rate(lambda r: (f(r) >= 0.9, f(r)), start, midpoint="geometric", **kw)


@pytest.mark.parametrize("start", [0.01, 1.0, 3.7, 50.0, 5000.0])
def test_geometric_search_brackets_the_threshold_of_a_monotone_function(start: float) -> None:
    threshold = 3.7
    f = smooth(threshold)
    res = attainment_search(f, start, rel_tol=0.01, steps=12, min_rate_rps=1e-3, max_rate_rps=1e4)
    assert res.rate_rps <= threshold <= res.upper_rps
    assert res.upper_rps / res.rate_rps <= 1.01
    assert f(res.rate_rps) >= 0.9 and res.best == pytest.approx(f(res.rate_rps))
    assert dict(res.evaluations)[res.rate_rps] >= 0.9  # the answer is a rate that was run and passed


def test_geometric_search_on_a_step_function_stops_within_its_steps() -> None:
    calls: list[float] = []

    def step(r: float) -> float:
        calls.append(r)
        return 1.0 if r <= 2.0 else 0.0

    res = search_max_rate(lambda r: (step(r) >= 0.9, None), 1.5, rel_tol=1e-6, steps=8)
    assert res.rate_rps <= 2.0 < res.upper_rps
    assert len(calls) == res.n_evals == len(set(calls))  # every rate evaluated once
    assert res.n_evals <= 2 + 8  # bracket (start, one doubling) + at most `steps` bisections


def test_search_bounds_never_passing_and_always_passing() -> None:
    never = attainment_search(lambda r: 0.5, 1.0, min_rate_rps=0.1)
    assert never.rate_rps == 0.0 and never.best is None and never.upper_rps == pytest.approx(0.125)
    always = attainment_search(lambda r: 1.0, 1.0, max_rate_rps=10.0)
    assert always.rate_rps == 10.0 and math.isinf(always.upper_rps)
    with pytest.raises(ValueError, match="growth"):
        search_max_rate(lambda r: (True, None), 1.0, growth=1.0)
    with pytest.raises(ValueError, match="midpoint"):
        search_max_rate(lambda r: (True, None), 1.0, midpoint="median")
    with pytest.raises(ValueError, match="start_rps"):
        search_max_rate(lambda r: (True, None), 0.0)


# ---------------------------------------------------------------------------------------------- arithmetic search

@pytest.mark.parametrize("threshold", [0.03, 0.7, 3.7, 41.0])
@pytest.mark.parametrize("guess", [0.5, 4.0, 100.0])
def test_arithmetic_search_finds_the_threshold_of_a_monotone_predicate(threshold, guess):
    calls = []

    def evaluate(rate):
        calls.append(rate)
        return rate <= threshold, rate

    result = search_max_rate(evaluate, guess, steps=10, max_expand=12, midpoint="arithmetic")
    assert result.rate_rps <= threshold < result.upper_rps
    bracket = max(threshold, guess) * 2 - min(threshold, guess) / 2
    assert result.upper_rps - result.rate_rps <= bracket / 2**10 + 1e-12
    assert result.best == result.rate_rps
    assert len(result.probes) == len(calls) <= 1 + 12 + 10


def test_arithmetic_search_without_a_bracket_stops_after_max_expand():
    none = search_max_rate(lambda r: (False, None), 1.0, steps=3, max_expand=4, midpoint="arithmetic")
    assert none.rate_rps == 0.0 and none.best is None and none.upper_rps == pytest.approx(1.0 / 16)
    assert [r for r, _, _ in none.probes] == [1.0, 0.5, 0.25, 0.125, 0.0625]
    every = search_max_rate(lambda r: (True, None), 1.0, steps=3, max_expand=4, midpoint="arithmetic")
    assert every.rate_rps == 16.0 and math.isinf(every.upper_rps) and len(every.probes) == 5


def test_a_noisy_predicate_only_makes_the_answer_conservative():
    # passes at 1, fails at 2, passes at 3 (noise), fails above: the answer stays inside the first bracket
    result = search_max_rate(lambda r: (r <= 1.0 or 2.9 <= r <= 3.1, r), 1.0, steps=4, midpoint="arithmetic")
    assert result.rate_rps <= 2.0 and all(ok for r, ok, _ in result.probes if r == result.rate_rps)


# ---------------------------------------------------------------------------------------------- reading a sweep


def test_capacity_interpolates_between_the_last_passing_and_the_next_point():
    cap = capacity_at([1, 2, 3, 4], [0.99, 0.95, 0.85, 0.5], 0.9)
    assert cap.bound == "exact"
    assert cap.value == pytest.approx(2.5)  # 2 + (0.95 - 0.9) / (0.95 - 0.85)


def test_capacity_sorts_points_and_drops_nan():
    cap = capacity_at([3, np.nan, 1, 2], [0.5, 1.0, 1.0, 0.9], 0.9)
    assert cap.value == pytest.approx(2.0) and cap.bound == "exact"


def test_capacity_takes_the_highest_passing_point_of_a_non_monotone_curve():
    cap = capacity_at([1, 2, 3, 4], [0.95, 0.8, 0.92, 0.5], 0.9)
    assert cap.value == pytest.approx(3 + 0.02 / 0.42)


def test_capacity_is_a_lower_bound_when_the_fastest_point_passes():
    cap = capacity_at([1, 2, 3], [1.0, 0.99, 0.91], 0.9)
    assert (cap.value, cap.bound) == (3.0, "at_least")
    assert str(cap) == ">=3"


def test_capacity_is_zero_when_even_the_slowest_point_fails():
    cap = capacity_at([2, 4], [0.85, 0.2], 0.9)
    assert (cap.value, cap.bound, cap.lowest) == (0.0, "below_range", 2.0)


def test_capacity_needs_a_point():
    with pytest.raises(ValueError):
        capacity_at([np.nan], [0.5], 0.9)


