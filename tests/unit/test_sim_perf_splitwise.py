"""splitwise-sim's profile: exact at grid points, monotone between, linear beyond; names map; errors list."""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict

import numpy as np
import pytest
from omegaconf import OmegaConf

from systems.config import ModelConfig
from systems.hardware_catalog import CONF_DIR, load_hardware
from systems.sim.perf.base import InstanceShape
from systems.sim.perf.profiles import SPLITWISE_CSV, ProfileNotFoundError, find_profile
from systems.sim.perf.splitwise_profile import SplitwiseProfileModel


def load_model(name: str) -> ModelConfig:
    node = OmegaConf.merge(OmegaConf.structured(ModelConfig), OmegaConf.load(CONF_DIR / "model" / f"{name}.yaml"))
    return OmegaConf.to_object(node)


@pytest.fixture(scope="module")
def csv_path() -> str:
    try:
        return str(find_profile(SPLITWISE_CSV))
    except ProfileNotFoundError as exc:
        pytest.fail(f"the tests need the public profiles: {exc}")


def profile(csv_path, hardware="a100_80gb", tp=4, model="llama2_70b"):
    profiles_dir = str(csv_path).removesuffix(SPLITWISE_CSV)
    return SplitwiseProfileModel(load_model(model), load_hardware(hardware), InstanceShape(hardware, tp),
                                 profiles_dir=profiles_dir)


def medians(csv_path, hardware, tp):
    """Median prompt time per total prompt tokens and token time per batch at prompt 512 / 128 out (ms)."""
    prompt, token = defaultdict(list), defaultdict(list)
    with open(csv_path, newline="") as fh:
        for r in csv.DictReader(fh):
            if (r["model"], r["hardware"], r["tensor_parallel"]) != ("llama2-70b", hardware.replace("_", "-"), str(tp)):
                continue
            prompt[int(r["prompt_size"]) * int(r["batch_size"])].append(float(r["prompt_time"]))
            if (r["prompt_size"], r["token_size"]) == ("512", "128"):
                token[int(r["batch_size"])].append(float(r["token_time"]))
    return ({k: statistics.median(v) for k, v in prompt.items()},
            {k: statistics.median(v) for k, v in token.items()})


@pytest.mark.parametrize("hardware,tp", [("a100_80gb", 4), ("h100_80gb", 8), ("h100_80gb_pcap", 2)])
def test_exact_at_grid_points(csv_path, hardware, tp):
    model = profile(csv_path, hardware, tp)
    prompt, token = medians(csv_path, hardware, tp)
    dropped_tokens = {p * b for p, b in model.grid.dropped}
    dropped_batches = {b for _, b in model.grid.dropped}
    xs = sorted(t for t in prompt if t not in dropped_tokens)
    running = 0.0
    for t in xs:
        running = max(running, prompt[t])  # the grid is made non-decreasing
        assert model.prefill_time_s(t, 0.0) == pytest.approx(running / 1e3, rel=1e-9)
    assert len(xs) >= 7
    run = 0.0
    for b in sorted(b for b in token if b not in dropped_batches):
        run = max(run, token[b])
        assert model.decode_step_time_s(b, b * (512 + 64.0)) == pytest.approx(run / 1e3, rel=1e-9)


def test_monotone_between_grid_points_and_linear_beyond(csv_path):
    model = profile(csv_path, "a100_80gb", 8)
    xs = np.array(model.grid.prefill_tokens)
    probe = np.unique(np.concatenate([np.linspace(xs[0], xs[-1], 400), xs]))
    times = [model.prefill_time_s(float(t), 0.0) for t in probe]
    assert all(b >= a for a, b in zip(times, times[1:], strict=False))
    x0, x1 = xs[-2], xs[-1]
    y0, y1 = model.prefill_time_s(x0, 0.0), model.prefill_time_s(x1, 0.0)
    far = 2 * x1
    assert model.prefill_time_s(far, 0.0) == pytest.approx(y1 + (y1 - y0) * (far - x1) / (x1 - x0))
    batches = np.arange(1, 200)
    dec = model.decode_step_time_s(batches, batches * 576.0)
    assert np.all(np.diff(dec) >= 0)


def test_decode_context_term_is_bilinear(csv_path):
    model = profile(csv_path, "a100_80gb", 2)
    s = model.grid.context_slope_ms
    assert s > 0
    base = model.decode_step_time_s(8, 8 * 576.0)
    assert model.decode_step_time_s(8, 8 * 2576.0) == pytest.approx(base + s * 8 * 2000 / 1e3)


def test_failed_runs_are_dropped(csv_path):
    assert (512, 64) in profile(csv_path, "a100_80gb", 2).grid.dropped
    assert profile(csv_path, "a100_80gb", 8).grid.dropped == ()


def test_power_capped_prefill_is_slower_decode_is_not(csv_path):
    h100, pcap = profile(csv_path, "h100_80gb", 4), profile(csv_path, "h100_80gb_pcap", 4)
    assert pcap.prefill_time_s(2048, 0.0) == pytest.approx(1.3 * h100.prefill_time_s(2048, 0.0), rel=0.01)
    assert pcap.decode_step_time_s(16, 16 * 600.0) == pytest.approx(h100.decode_step_time_s(16, 16 * 600.0))


def test_array_and_scalar_calls_agree(csv_path):
    model = profile(csv_path, "h100_80gb", 2)
    bs = np.array([0, 1, 3, 17, 64, 128])
    ctx = bs * 900.0
    arr = model.decode_step_time_s(bs, ctx)
    for b, c, t in zip(bs, ctx, arr, strict=True):
        assert model.decode_step_time_s(int(b), float(c)) == pytest.approx(t, rel=1e-12)


def test_power_samples_only_where_measured(csv_path):
    a100 = profile(csv_path, "a100_80gb", 2).power_samples()
    assert a100 and all(0 < peak <= 1.2 and 0 < avg <= 1 for *_, peak, avg in a100)
    assert profile(csv_path, "h100_80gb", 2).power_samples() == ()


def test_uncovered_combinations_are_rejected(csv_path):
    with pytest.raises(ValueError, match="llama2_70b"):
        profile(csv_path, model="opt_13b", tp=1)
    with pytest.raises(ValueError, match="a100_80gb"):
        profile(csv_path, hardware="h200", tp=2)
    with pytest.raises(ValueError, match="llama2-70b/a100-80gb/tp2"):
        profile(csv_path, "a100_80gb", tp=1)
    with pytest.raises(ValueError, match="pp"):
        SplitwiseProfileModel(load_model("llama2_70b"), load_hardware("a100_80gb"), InstanceShape("a100_80gb", 2, 2))
