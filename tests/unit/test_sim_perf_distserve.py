"""DistServe's fitted model against hand computations from the public JSON numbers."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from systems.config import ModelConfig
from systems.hardware_catalog import CONF_DIR, load_hardware
from systems.sim.perf.base import InstanceShape
from systems.sim.perf.distserve_fit import DistServeFitModel
from systems.sim.perf.profiles import DISTSERVE_JSON, ProfileNotFoundError, find_profile

# profiler-a100-80g.distserve.json, facebook/opt-13b, TP 1 (copied by hand from the file)
PREFILL = (18.10254647486372, 0.1019122572698738, 7.122264314252114e-06)
SMALL = (19.934702624895458, 0.0006269356524350583, 0.03850697740828398)
LARGE = (7.1661889468253595, 0.0005798000403396046, 0.15831096191764046)


def load_model(name: str) -> ModelConfig:
    node = OmegaConf.merge(OmegaConf.structured(ModelConfig), OmegaConf.load(CONF_DIR / "model" / f"{name}.yaml"))
    return OmegaConf.to_object(node)


@pytest.fixture(scope="module")
def profiles_dir() -> str:
    """The profiles directory, found as the suite finds it; fails (never skips) when it is missing."""
    try:
        return str(find_profile(DISTSERVE_JSON["distserve"]).parents[1])
    except ProfileNotFoundError as exc:
        pytest.fail(f"the tests need the public profiles: {exc}")


def fit(profiles_dir, model="opt_13b", tp=1, pp=1, engine="distserve", adjust=None):
    return DistServeFitModel(load_model(model), load_hardware("a100_80gb"), InstanceShape("a100_80gb", tp, pp),
                             profiles_dir=profiles_dir, engine=engine, adjust=adjust)


def test_prefill_matches_the_hand_computation(profiles_dir):
    lengths = [512, 256, 100]
    a, b, c = PREFILL
    want_ms = a + b * sum(lengths) + c * sum(x * x for x in lengths) + 1  # + pp ms, pp = 1
    got = fit(profiles_dir).prefill_time_s(sum(lengths), sum(x * x for x in lengths), len(lengths))
    assert got == pytest.approx(want_ms / 1e3, rel=1e-12)


def test_pipeline_prefill_divides_and_adds_pp_ms_and_decode_sums_its_stages(profiles_dir):
    a, b, c = PREFILL
    want_ms = (a + b * 1000 + c * 1000**2) / 4 + 4
    assert fit(profiles_dir, pp=4).prefill_time_s(1000, 1000**2) == pytest.approx(want_ms / 1e3)
    a, b, c = SMALL
    # upstream's stage time is the step / pp; a token passes all pp stages: the step is their sum
    stage_ms = (a + b * 5010 + c * 10) / 4
    assert fit(profiles_dir, pp=4).decode_step_time_s(10, 5000.0) == pytest.approx(4 * stage_ms / 1e3)
    assert fit(profiles_dir, pp=4).decode_step_time_s(10, 5000.0) == pytest.approx(
        fit(profiles_dir, pp=1).decode_step_time_s(10, 5000.0))


def test_profile_adjust_scales_prefill_and_adds_per_step_and_per_sequence_decode_cost(profiles_dir):
    plain = fit(profiles_dir)
    adjusted = fit(profiles_dir, adjust=(0.8, 3.0, 0.5))
    assert adjusted.prefill_time_s(1000, 1000**2) == pytest.approx(
        0.8 * (plain.prefill_time_s(1000, 1000**2) - 1e-3) + 1e-3)  # the + pp ms is not scaled
    for batch in (10, 200):  # both decode fits
        assert adjusted.decode_step_time_s(batch, 5000.0) == pytest.approx(
            plain.decode_step_time_s(batch, 5000.0) + (3.0 + 0.5 * batch) / 1e3)
    ends = adjusted.decode_segment_ends(10, 5000, 5, 1.0)
    assert ends[0] == pytest.approx(1.0 + float(adjusted.decode_step_time_s(10, 5000.0)))


def test_decode_switches_coefficients_at_the_threshold(profiles_dir):
    model = fit(profiles_dir)
    assert model.threshold == 95
    for batch, (a, b, c) in ((94, SMALL), (95, LARGE), (200, LARGE), (1, SMALL)):
        ctx = batch * 700.0
        want_ms = a + b * (ctx + batch) + c * batch
        assert model.decode_step_time_s(batch, ctx) == pytest.approx(want_ms / 1e3, rel=1e-12)


def test_array_and_scalar_decode_agree(profiles_dir):
    model = fit(profiles_dir, model="opt_66b", tp=4)
    bs = np.array([1, 50, 94, 95, 96, 300])
    ctx = bs * 512.0
    arr = model.decode_step_time_s(bs, ctx)
    assert arr.shape == bs.shape
    for b, c, t in zip(bs, ctx, arr, strict=True):
        assert model.decode_step_time_s(int(b), float(c)) == pytest.approx(t, rel=1e-12)


def test_vllm_engine_reads_the_other_file(profiles_dir):
    a, b, c = 22.052204789310185, 0.14050923870128956, 8.076584822611088e-06  # .vllm.json, opt-13b TP 1
    got = fit(profiles_dir, engine="vllm").prefill_time_s(512, 512**2)
    assert got == pytest.approx((a + b * 512 + c * 512**2 + 1) / 1e3)
    with pytest.raises(ValueError, match="engine"):
        fit(profiles_dir, engine="sglang")


def test_kv_capacity_from_the_csv_or_computed(profiles_dir):
    assert fit(profiles_dir).kv_capacity_tokens == 66144
    assert fit(profiles_dir, model="opt_66b", tp=2).kv_capacity_tokens == 11600
    computed = fit(profiles_dir, pp=3)  # (opt-13b, 1, 3) is not in max_num_tokens.csv
    assert 163008 < computed.kv_capacity_tokens < 356752  # between the csv's pp=2 and pp=4 rows


def test_uncovered_combinations_are_rejected_with_what_exists(profiles_dir):
    with pytest.raises(ValueError, match="opt_13b"):
        DistServeFitModel(load_model("llama2_70b"), load_hardware("a100_80gb"), InstanceShape("a100_80gb", 4),
                          profiles_dir=profiles_dir)
    with pytest.raises(ValueError, match="a100_80gb"):
        DistServeFitModel(load_model("opt_13b"), load_hardware("h100_80gb"), InstanceShape("h100_80gb", 1),
                          profiles_dir=profiles_dir)
    with pytest.raises(ValueError, match="tp 1, 2, 4"):
        fit(profiles_dir, tp=8)
