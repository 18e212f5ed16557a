"""Percentiles found rank by rank are the very floats ``np.percentile(method="linear")`` gives."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness import metrics
from harness.order_statistics import has_negative_zero, linear_percentiles, order_statistics

QS = [0.0, 0.1, 1.0, 25.0, 49.99, 50.0, 50.01, 75.0, 90.0, 99.0, 99.9, 99.99, 100.0]


def _same(a: float, b: float) -> bool:
    """Equal floats, the sign of zero included; NaN equals NaN."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def _arrays() -> list[np.ndarray]:
    rng = np.random.default_rng(11)
    out = [np.array([3.5]), np.array([2.0, 1.0]), np.array([1.0, 1.0, 1.0])]
    for n in (3, 4, 5, 10, 11, 101, 1000, 4097, 50_000, 250_001):
        out.append(rng.gamma(2.0, 20.0, n))  # latencies in ms
        out.append(np.round(rng.exponential(5.0, n), 1))  # many ties
        out.append(rng.integers(0, 3, n).astype(np.float64))  # few distinct values, zeros among them
    with_inf = rng.gamma(2.0, 20.0, 2000)
    with_inf[::97] = np.inf
    out.append(with_inf)
    out.append(rng.normal(0.0, 1e6, 5000))  # negative values
    out.append(np.full(1000, 7.25))
    return out


@pytest.mark.parametrize("values", _arrays(), ids=lambda a: f"n{a.size}")
def test_the_same_floats_as_numpy(values: np.ndarray) -> None:
    before = values.copy()
    got = linear_percentiles(values, QS)
    want = np.percentile(values, QS, method="linear").tolist()
    assert all(_same(g, w) for g, w in zip(got, want, strict=True)), (got, want)
    assert all(type(g) is float for g in got)
    assert np.array_equal(values, before)  # the input is left as it was


def test_random_quantiles_on_random_sizes() -> None:
    rng = np.random.default_rng(5)
    for _ in range(300):
        n = int(rng.integers(1, 3000))
        values = rng.lognormal(3.0, 1.0, n) if rng.random() < 0.5 else rng.integers(0, 50, n).astype(float)
        qs = rng.uniform(0.0, 100.0, int(rng.integers(1, 6))).tolist()
        got = linear_percentiles(values, qs)
        want = np.percentile(values, qs, method="linear").tolist()
        assert all(_same(g, w) for g, w in zip(got, want, strict=True)), (n, qs, got, want)


def test_order_statistics_are_the_sorted_values_at_those_ranks() -> None:
    values = np.random.default_rng(2).permutation(np.arange(1000, dtype=np.float64))
    ranks = [0, 1, 2, 500, 501, 998, 999]
    assert order_statistics(values, ranks) == {r: float(r) for r in ranks}


def test_negative_zero_is_seen() -> None:
    assert has_negative_zero(np.array([1.0, -0.0, 2.0]))
    assert not has_negative_zero(np.array([1.0, 0.0, -2.0]))
    assert not has_negative_zero(np.array([1.0, 0.0, 2.0]))


def test_summary_percentiles_take_the_rank_by_rank_path_and_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """``metrics.percentiles`` finds the ranks one by one (numpy's percentile is not called) and gives numpy's
    floats; with a negative zero among the values it leaves the choice of zero to numpy."""
    values = np.random.default_rng(3).gamma(2.0, 20.0, 60_017)
    values[::1000] = np.nan  # dropped first
    qs = [q for _, q in metrics.PERCENTILE_STATS]
    want = np.percentile(values[~np.isnan(values)], qs, method="linear").tolist()
    with_negative_zero = np.abs(values)
    with_negative_zero[5] = -0.0
    want_with_negative_zero = np.percentile(with_negative_zero[~np.isnan(with_negative_zero)], qs,
                                            method="linear").tolist()
    calls: list[int] = []
    numpy_percentile = np.percentile
    monkeypatch.setattr(np, "percentile", lambda *a, **k: calls.append(1) or numpy_percentile(*a, **k))
    assert metrics.percentiles(values, qs) == want
    assert metrics.percentiles([4.0, 1.0, 2.5], [50.0, 100.0]) == [2.5, 4.0]
    assert not calls
    assert metrics.percentiles(with_negative_zero, qs) == want_with_negative_zero
    assert calls == [1]
