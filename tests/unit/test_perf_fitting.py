"""Fitting the fitted performance model's forms (systems/sim/perf/fitting.py): known coefficients come back
from noisy synthetic samples, the fit minimises the relative error, negative terms are dropped and the rest
refitted, and too few samples are refused naming the phase."""

from __future__ import annotations

import math

import numpy as np
import pytest

from systems.sim.perf.fitting import LinearFit, fit_decode, fit_prefill, fit_transfer


def prefill_samples(a: float, b: float, c: float, noise: float = 0.0, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for length in (64, 128, 256, 512, 1024, 2048):
        for batch in (1, 2, 4):
            st, sq = length * batch, length * length * batch
            t = (a + b * st + c * sq) * (1 + noise * rng.standard_normal())
            out.append({"phase": "prefill", "sum_tokens": st, "sum_sq_tokens": sq, "n_seqs": batch, "time_ms": t})
    return out


def decode_samples(a: float, b: float, c: float, noise: float = 0.0, seed: int = 1) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for batch in (1, 2, 4, 8, 16, 32):
        for context in (128, 512, 1024, 2100):
            t = (a + b * batch * context + c * batch) * (1 + noise * rng.standard_normal())
            out.append({"phase": "decode", "batch_size": batch, "sum_context": batch * context, "time_ms": t})
    return out


def transfer_samples(latency: float, bandwidth: float, noise: float = 0.0, seed: int = 2) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"phase": "kv_transfer", "bytes": float(x), "time_s": (latency + x / bandwidth) * (1 + noise * rng.standard_normal())}
            for x in np.geomspace(1e6, 2e7, 12)]


def rel_close(got: dict[str, float], want: dict[str, float], tol: float) -> bool:
    return all(math.isclose(got[k], v, rel_tol=tol) for k, v in want.items())


def test_noiseless_samples_give_the_coefficients_back_exactly() -> None:
    pre = fit_prefill(prefill_samples(9.1, 0.018, 1e-5))
    assert rel_close(pre.coefficients, {"a": 9.1, "b": 0.018, "c": 1e-5}, 1e-6) and pre.rel_rmse < 1e-9
    dec = fit_decode(decode_samples(2.8, 1e-5, 0.1))
    assert rel_close(dec.coefficients, {"a": 2.8, "b": 1e-5, "c": 0.1}, 1e-6) and dec.rel_rmse < 1e-9
    tr = fit_transfer(transfer_samples(0.004, 1.2e9))
    assert rel_close(tr.coefficients, {"latency_s": 0.004, "s_per_byte": 1 / 1.2e9}, 1e-6)
    assert (pre.n_samples, dec.n_samples, tr.n_samples) == (18, 24, 12)


def test_noisy_samples_give_the_coefficients_back_within_the_noise() -> None:
    pre = fit_prefill(prefill_samples(9.1, 0.018, 1e-5, noise=0.02))
    assert rel_close(pre.coefficients, {"a": 9.1, "b": 0.018, "c": 1e-5}, 0.1)
    assert 0.005 < pre.rel_rmse < 0.04  # about the 2% noise put in
    dec = fit_decode(decode_samples(2.8, 1e-5, 0.1, noise=0.02))
    assert rel_close(dec.coefficients, {"a": 2.8, "b": 1e-5, "c": 0.1}, 0.15)
    assert 0.005 < dec.rel_rmse < 0.04
    tr = fit_transfer(transfer_samples(0.004, 1.2e9, noise=0.02))
    assert rel_close(tr.coefficients, {"latency_s": 0.004, "s_per_byte": 1 / 1.2e9}, 0.1)
    assert 0.005 < tr.rel_rmse < 0.04


def test_predict_takes_terms_by_their_names_or_their_coefficients_names() -> None:
    fit = fit_prefill(prefill_samples(9.1, 0.018, 1e-5))
    want = 9.1 + 0.018 * 512 + 1e-5 * 512**2
    assert math.isclose(fit.predict(sum_tokens=512, sum_sq_tokens=512**2), want, rel_tol=1e-6)
    assert math.isclose(fit.predict(b=512, c=512**2), want, rel_tol=1e-6)
    tr = LinearFit({"latency_s": 0.004, "s_per_byte": 1e-9}, 3, 0.0, "latency_s", {"s_per_byte": "bytes"})
    assert math.isclose(tr.predict(bytes=1e6), 0.005)
    with pytest.raises(TypeError, match="unknown term"):
        fit.predict(sum_tokens=1, sum_sq_tokens=1, n_seqs=1)
    with pytest.raises(TypeError, match="missing term 'sum_sq_tokens'"):
        fit.predict(sum_tokens=1)


def test_the_fit_minimises_the_relative_error_not_the_absolute_one() -> None:
    # short transfers with one slope, long ones with another: an absolute fit serves the long ones
    samples = ([{"bytes": x, "time_s": 1e-3 + x * 1e-8} for x in (1e4, 2e4, 4e4, 8e4)]
               + [{"bytes": x, "time_s": 1e-3 + x * 1.5e-8} for x in (1e8, 2e8)])
    fit = fit_transfer(samples)
    x = np.array([[1.0, s["bytes"]] for s in samples])
    y = np.array([s["time_s"] for s in samples])
    weighted, *_ = np.linalg.lstsq(x / y[:, None], np.ones_like(y), rcond=None)  # rows weighted by 1/time
    assert np.allclose([fit.coefficients["latency_s"], fit.coefficients["s_per_byte"]], weighted, rtol=1e-8)
    absolute, *_ = np.linalg.lstsq(x, y, rcond=None)
    ours = np.array([fit.predict(bytes=s["bytes"]) for s in samples])
    rel_rmse_absolute_fit = float(np.sqrt(np.mean(((x @ absolute - y) / y) ** 2)))
    assert math.isclose(fit.rel_rmse, float(np.sqrt(np.mean(((ours - y) / y) ** 2))))
    assert fit.rel_rmse < rel_rmse_absolute_fit
    assert np.sum((x @ absolute - y) ** 2) < np.sum((ours - y) ** 2)  # the absolute fit wins on its own measure


def test_a_negative_term_is_dropped_and_the_rest_refitted() -> None:
    # a decode step that gets *cheaper* per sequence: unconstrained, c would be -0.2
    samples = [{"batch_size": b, "sum_context": b * c, "time_ms": 5 + 0.001 * b * c - 0.2 * b}
               for b in (1, 2, 4, 8) for c in (256, 512, 1024)]
    x = np.array([[1.0, s["sum_context"], s["batch_size"]] for s in samples])
    y = np.array([s["time_ms"] for s in samples])
    free, *_ = np.linalg.lstsq(x / y[:, None], np.ones_like(y), rcond=None)
    assert free[2] < 0  # the data do ask for a negative term
    fit = fit_decode(samples)
    assert fit.coefficients["c"] == 0.0 and all(v >= 0 for v in fit.coefficients.values())
    refit, *_ = np.linalg.lstsq(x[:, :2] / y[:, None], np.ones_like(y), rcond=None)  # a and b alone
    assert np.allclose([fit.coefficients["a"], fit.coefficients["b"]], refit, rtol=1e-8)


def test_a_negative_intercept_is_dropped_too() -> None:
    samples = [{"sum_tokens": n, "sum_sq_tokens": n * n, "time_ms": -3 + 0.02 * n + 1e-5 * n * n}
               for n in (256, 512, 1024, 2048, 4096)]
    fit = fit_prefill(samples)
    assert fit.coefficients["a"] == 0.0 and fit.coefficients["b"] > 0 and fit.coefficients["c"] > 0
    assert fit.predict(sum_tokens=0, sum_sq_tokens=0) == 0.0


@pytest.mark.parametrize(("fit", "phase", "make", "need"), [
    (fit_prefill, "prefill", lambda n: prefill_samples(9.1, 0.018, 1e-5)[:n], 4),
    (fit_decode, "decode", lambda n: decode_samples(2.8, 1e-5, 0.1)[:n], 4),
    (fit_transfer, "kv_transfer", lambda n: transfer_samples(0.004, 1.2e9)[:n], 3),
])
def test_too_few_samples_are_refused_naming_the_phase(fit, phase, make, need) -> None:
    with pytest.raises(ValueError, match=rf"^{phase} fit: needs at least {need} samples .* got {need - 1}$"):
        fit(make(need - 1))
    assert fit(make(need)).n_samples == need


def test_bad_samples_are_refused_naming_the_phase_sample_and_key() -> None:
    samples = decode_samples(2.8, 1e-5, 0.1)
    samples[3] = {**samples[3], "time_ms": 0.0}
    with pytest.raises(ValueError, match=r"decode fit: sample 3 'time_ms' must be > 0"):
        fit_decode(samples)
    samples[3] = {k: v for k, v in decode_samples(2.8, 1e-5, 0.1)[3].items() if k != "sum_context"}
    with pytest.raises(ValueError, match=r"decode fit: sample 3 has no 'sum_context'"):
        fit_decode(samples)
    samples[3] = {**decode_samples(2.8, 1e-5, 0.1)[3], "batch_size": math.nan}
    with pytest.raises(ValueError, match=r"decode fit: sample 3 'batch_size' must be a finite number"):
        fit_decode(samples)
