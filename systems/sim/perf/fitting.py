"""Fitting the fitted performance model's linear forms to measured samples (numpy only).

Three forms, the terms of :mod:`systems.sim.perf.base`:

- prefill ms = ``a + b * sum_tokens + c * sum_sq_tokens`` (:func:`fit_prefill`);
- decode ms = ``a + b * sum_context + c * batch_size`` (:func:`fit_decode`);
- KV transfer s = ``latency_s + s_per_byte * bytes`` (:func:`fit_transfer`).

Each is a least-squares fit of the *relative* error: every sample's row is weighted by ``1 / time``, so a
1 ms step counts as much as a 1 s prefill (times span orders of magnitude and an absolute fit would only
see the long ones). Coefficients are never negative (a negative term would predict negative times outside
the measured range): while the fit has a negative coefficient, the most negative term is dropped (its
coefficient is 0) and the rest are refitted. Columns are scaled to unit size before solving, so terms of
very different magnitudes (``sum_sq_tokens`` ~ 1e7, the constant 1) are fitted equally well.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class LinearFit:
    """A fitted linear form: ``coefficients[constant] + sum(coefficients[k] * term_k)``.

    ``term_names`` maps each non-constant coefficient to the name of its term (prefill: ``b`` ->
    ``sum_tokens``); :meth:`predict` takes a term by either name. ``rel_rmse`` is the root mean square
    relative error of the fit over its ``n_samples`` samples.
    """

    coefficients: dict[str, float]
    n_samples: int
    rel_rmse: float
    constant: str = "a"
    term_names: dict[str, str] = field(default_factory=dict)

    def predict(self, **terms: float) -> float:
        """The form's value at ``terms`` (keys: the non-constant coefficients' names or their terms' names)."""
        known = {k for k in self.coefficients if k != self.constant}
        known |= {self.term_names[k] for k in known if k in self.term_names}
        unknown = sorted(set(terms) - known)
        if unknown:
            raise TypeError(f"predict: unknown term(s) {', '.join(unknown)}; expected {', '.join(sorted(known))}")
        total = self.coefficients.get(self.constant, 0.0)
        for name, coef in self.coefficients.items():
            if name == self.constant:
                continue
            term = self.term_names.get(name, name)
            if name in terms:
                value = terms[name]
            elif term in terms:
                value = terms[term]
            else:
                raise TypeError(f"predict: missing term {term!r} (coefficient {name!r})")
            total += coef * float(value)
        return float(total)


def _column(samples: Sequence[Mapping[str, float]], key: str, phase: str) -> np.ndarray:
    values = []
    for i, sample in enumerate(samples):
        if key not in sample:
            raise ValueError(f"{phase} fit: sample {i} has no {key!r}")
        value = sample[key]
        if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating) \
                or not math.isfinite(value):
            raise ValueError(f"{phase} fit: sample {i} {key!r} must be a finite number, got {value!r}")
        values.append(float(value))
    return np.asarray(values, dtype=float)


def fit_linear(samples: Sequence[Mapping[str, float]], phase: str, target: str, terms: Mapping[str, str],
               constant: str) -> LinearFit:
    """Relative-error least squares of ``target`` on a constant and ``terms`` (coefficient name -> sample key),
    every coefficient >= 0 (see the module docstring); ``ValueError`` naming ``phase`` on bad samples."""
    names = [constant, *terms]
    if len(samples) < len(names) + 1:
        raise ValueError(f"{phase} fit: needs at least {len(names) + 1} samples ({len(names)} coefficients + 1), "
                         f"got {len(samples)}")
    y = _column(samples, target, phase)
    bad = np.flatnonzero(y <= 0)
    if bad.size:
        raise ValueError(f"{phase} fit: sample {int(bad[0])} {target!r} must be > 0 (the fit weights by 1/time), "
                         f"got {y[bad[0]]}")
    columns = {constant: np.ones_like(y)}
    for name, key in terms.items():
        col = _column(samples, key, phase)
        if (col < 0).any():
            raise ValueError(f"{phase} fit: {key!r} must be >= 0, got {col.min()}")
        columns[name] = col
    active = list(names)
    coefs: dict[str, float] = {}
    while active:
        x = np.column_stack([columns[n] for n in active]) / y[:, None]  # rows weighted by 1/time
        scale = np.abs(x).max(axis=0)
        scale[scale == 0] = 1.0
        solution, *_ = np.linalg.lstsq(x / scale, np.ones_like(y), rcond=None)
        solution = solution / scale
        if (solution >= 0).all():
            coefs = dict(zip(active, (float(v) for v in solution), strict=True))
            break
        active.pop(int(np.argmin(solution)))  # the most negative term goes; refit the rest
    coefficients = {n: coefs.get(n, 0.0) for n in names}
    predicted = sum(coefficients[n] * columns[n] for n in names)
    rel_rmse = float(np.sqrt(np.mean(((predicted - y) / y) ** 2)))
    return LinearFit(coefficients, len(samples), rel_rmse, constant, dict(terms))


def fit_prefill(samples: Sequence[Mapping[str, float]]) -> LinearFit:
    """Prefill ms = ``a + b * sum_tokens + c * sum_sq_tokens`` from samples with ``sum_tokens``,
    ``sum_sq_tokens`` and ``time_ms``."""
    return fit_linear(samples, "prefill", "time_ms", {"b": "sum_tokens", "c": "sum_sq_tokens"}, "a")


def fit_prefill_with_overhead(samples: Sequence[Mapping[str, float]]) -> tuple[LinearFit, float]:
    """The prefill form plus a request overhead (ms): samples with ``span`` = ``"send"`` were timed from the
    client's send (the overhead is in them), ``"iteration"`` ones between two engine iterations (it is not).
    Returns (the prefill fit with the overhead taken out of its rows, the overhead). Without samples of both
    spans the two constants cannot be told apart: the overhead is 0 and ``a`` holds it."""
    spans = {s.get("span", "send") for s in samples}
    if spans != {"send", "iteration"}:
        return fit_prefill(samples), 0.0
    rows = [{**s, "from_send": 1.0 if s.get("span", "send") == "send" else 0.0} for s in samples]
    fit = fit_linear(rows, "prefill", "time_ms", {"b": "sum_tokens", "c": "sum_sq_tokens", "overhead": "from_send"}, "a")
    overhead = fit.coefficients.pop("overhead")
    fit.term_names.pop("overhead", None)
    return fit, overhead


def fit_decode(samples: Sequence[Mapping[str, float]]) -> LinearFit:
    """Decode-step ms = ``a + b * sum_context + c * batch_size`` from samples with ``batch_size``,
    ``sum_context`` and ``time_ms``."""
    return fit_linear(samples, "decode", "time_ms", {"b": "sum_context", "c": "batch_size"}, "a")


def fit_transfer(samples: Sequence[Mapping[str, float]]) -> LinearFit:
    """KV transfer s = ``latency_s + s_per_byte * bytes`` from samples with ``bytes`` and ``time_s``."""
    return fit_linear(samples, "kv_transfer", "time_s", {"s_per_byte": "bytes"}, "latency_s")
