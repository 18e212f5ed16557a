"""The peer simulators' timing options: each changes timing the documented way, the defaults change nothing."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from systems.config import ModelConfig
from systems.engine_config import SimEngineConfig
from systems.hardware_catalog import CONF_DIR, load_hardware
from systems.sim.perf.base import InstanceShape, PerfModel
from systems.sim.perf.distserve_fit import DistServeFitModel
from systems.sim.perf.peer_timing import (
    PeerTimedModel,
    apply_peer_timing,
    interp_extrapolate,
    simdistserve_overhead_s,
    splitwise_sim_token_table,
)
from systems.sim.perf.registry import build_perf_model
from systems.sim.perf.splitwise_profile import ProfileRow, SplitwiseProfileModel
from vocab.errors import ConfigError
from vocab.records import RequestSpec


def load_model(name: str) -> ModelConfig:
    node = OmegaConf.merge(OmegaConf.structured(ModelConfig), OmegaConf.load(CONF_DIR / "model" / f"{name}.yaml"))
    return OmegaConf.to_object(node)


def distserve(**options: str):
    return build_perf_model("distserve", load_model("opt_13b"), load_hardware("a100_80gb"),
                            InstanceShape("a100_80gb", 1), **options)


def splitwise(tp: int = 8, **options: str):
    return build_perf_model("splitwise", load_model("llama2_70b"), load_hardware("a100_80gb"),
                            InstanceShape("a100_80gb", tp), **options)


def test_defaults_return_the_model_unwrapped():
    for kind, perf in (("distserve", distserve()), ("splitwise", splitwise())):
        assert not isinstance(perf, PeerTimedModel), kind
        assert "iteration_overhead" not in perf.describe()
    plain = DistServeFitModel(load_model("opt_13b"), load_hardware("a100_80gb"), InstanceShape("a100_80gb", 1))
    built = distserve(iteration_overhead="none", token_phase_timing="ours")
    assert built.prefill_time_s(700, 700**2) == plain.prefill_time_s(700, 700**2)
    assert built.decode_step_time_s(12, 9000.0) == plain.decode_step_time_s(12, 9000.0)
    assert apply_peer_timing(plain) is plain


def test_simdistserve_overhead_is_2ms_plus_1e4ms_per_context_token():
    plain, timed = distserve(), distserve(iteration_overhead="simdistserve")
    assert isinstance(timed, PeerTimedModel) and timed.name == "distserve"
    assert simdistserve_overhead_s(1000) == pytest.approx(2.1e-3)
    # prefill: the iteration's prompt tokens
    assert timed.prefill_time_s(1000, 1000**2) - plain.prefill_time_s(1000, 1000**2) == pytest.approx(2.1e-3)
    assert timed.prefill_time_s(0, 0) == plain.prefill_time_s(0, 0) == 0.0
    # decode: the batch's context tokens, scalar and in the simulator's segment form (scalar batch, array context)
    assert timed.decode_step_time_s(8, 5000.0) - plain.decode_step_time_s(8, 5000.0) == pytest.approx(2.5e-3)
    ctx = np.array([5000.0, 5008.0, 20000.0])
    diff = timed.decode_step_time_s(8, ctx) - plain.decode_step_time_s(8, ctx)
    np.testing.assert_allclose(diff, (2 + 1e-4 * ctx) / 1e3)
    batch = np.array([1, 100])
    np.testing.assert_allclose(timed.decode_step_time_s(batch, ctx[:2]) - plain.decode_step_time_s(batch, ctx[:2]),
                               (2 + 1e-4 * ctx[:2]) / 1e3)
    # a mixed iteration pays it once, over its prompt and decode tokens
    mixed = timed.mixed_step_time_s(512, 512**2, 1, 4, 3000.0) - plain.mixed_step_time_s(512, 512**2, 1, 4, 3000.0)
    assert mixed == pytest.approx((2 + 1e-4 * 3512) / 1e3)
    assert timed.kv_capacity_tokens == plain.kv_capacity_tokens and timed.threshold == plain.threshold
    assert timed.describe()["iteration_overhead"] == "simdistserve"


def test_splitwise_sim_token_table_is_median_per_batch_tokens():
    def row(prompt: int, batch: int, token_ms: float, model: str = "m") -> ProfileRow:
        return ProfileRow(model, "h", 8, prompt, batch, 128, 0.0, 0.0, 100.0, token_ms)

    rows = (row(128, 1, 40.0), row(256, 1, 42.0), row(128, 2, 44.0), row(128, 2, 46.0), row(128, 2, 60.0),
            row(128, 1, 99.0, model="other"))
    xs, ys = splitwise_sim_token_table(rows, "m", "h", 8)
    assert xs == (128.0, 256.0) and ys == (40.0, 45.0)  # 256 tokens: prompt 256 x 1 and 128 x 2 merge: 42, 44, 46, 60
    assert interp_extrapolate(0.0, xs, ys) == pytest.approx(35.0)  # below the first point: the first segment, extended
    np.testing.assert_allclose(interp_extrapolate(np.array([128.0, 192.0, 384.0]), xs, ys), [40.0, 42.5, 50.0])
    with pytest.raises(ValueError, match="no rows for x"):
        splitwise_sim_token_table(rows, "x", "h", 8)


def test_splitwise_sim_decode_step_ignores_batch_and_context():
    ours, peer = splitwise(), splitwise(token_phase_timing="splitwise_sim")
    assert isinstance(peer, PeerTimedModel) and isinstance(peer.inner, SplitwiseProfileModel)
    steps = [float(peer.decode_step_time_s(b, b * 600.0)) for b in (1, 8, 32, 64)]
    assert max(steps) - min(steps) < 1e-3  # about the same whatever the batch (42.6-42.8 ms on A100, TP 8)
    ours_steps = [float(ours.decode_step_time_s(b, b * 600.0)) for b in (1, 64)]
    assert ours_steps[1] - ours_steps[0] > 0.02  # ours grows with the batch (the measured batch sweep)
    assert peer.decode_step_time_s(8, 100.0) == peer.decode_step_time_s(8, 1e6)
    seg = peer.decode_step_time_s(8, np.array([4000.0, 4008.0, 4016.0]))
    assert seg.shape == (3,) and np.all(seg == seg[0])
    # prefill and mixed iterations keep the splitwise model's rules (already splitwise-sim's)
    assert peer.prefill_time_s(2048, 2048**2) == ours.prefill_time_s(2048, 2048**2)
    assert peer.mixed_step_time_s(512, 512**2, 1, 4, 3000.0) == ours.mixed_step_time_s(512, 512**2, 1, 4, 3000.0)
    assert peer.mixed_step_time_s(0, 0, 0, 4, 3000.0) == peer.decode_step_time_s(4, 3000.0)
    assert peer.describe()["token_phase_timing"] == "splitwise_sim"
    assert peer.measured_points() == ours.measured_points()


def test_options_combine():
    both = splitwise(token_phase_timing="splitwise_sim", iteration_overhead="simdistserve")
    peer = splitwise(token_phase_timing="splitwise_sim")
    assert both.decode_step_time_s(4, 3000.0) - peer.decode_step_time_s(4, 3000.0) == pytest.approx(2.3e-3)


def test_bad_values_and_splitwise_sim_on_another_model_are_rejected():
    with pytest.raises(ValueError, match="iteration_overhead must be one of none, simdistserve"):
        distserve(iteration_overhead="ray")
    with pytest.raises(ValueError, match="only the splitwise performance model"):
        distserve(token_phase_timing="splitwise_sim")
    with pytest.raises(ConfigError, match="engine.iteration_overhead: expected one of none, simdistserve"):
        SimEngineConfig(name="sim", iteration_overhead="ray")
    with pytest.raises(ConfigError, match="engine.token_phase_timing: expected one of ours, splitwise_sim"):
        SimEngineConfig(name="sim", token_phase_timing="vidur")
    with pytest.raises(ConfigError, match="only engine.perf_model=splitwise reads"):
        SimEngineConfig(name="sim", perf_model="roofline", token_phase_timing="splitwise_sim")
    SimEngineConfig(name="sim", perf_model="splitwise", token_phase_timing="splitwise_sim")


def _run(overrides: list[str]):
    from harness.studies.variants import compose_variant
    from systems.sim.simulated_deployment import SimulatedDeployment

    cfg = compose_variant(["system=distserve", "model=opt_13b", "hardware=a100_80gb", "engine.perf_model=distserve",
                           "engine.progress=false", *overrides])
    cluster = SimulatedDeployment(cfg)
    specs = [RequestSpec(i, 0.5 * i, 400 + 50 * i, 20) for i in range(4)]
    _, run = cluster.run(specs)
    return cluster, run.records()


def test_the_option_reaches_the_simulator_through_the_config():
    base_cluster, base = _run([])
    timed_cluster, timed = _run(["engine.iteration_overhead=simdistserve"])
    assert not any(isinstance(p, PeerTimedModel) for p in base_cluster.perf.values())
    assert all(isinstance(p, PeerTimedModel) for p in timed_cluster.perf.values())
    assert timed_cluster.describe()["pools"][0]["iteration_overhead"] == "simdistserve"
    for b, t in zip(base, timed, strict=True):
        # an unloaded prefill: one iteration, 2 ms + 1e-4 ms per prompt token longer
        ttft_s = (t.first_token_s - t.arrival_s) - (b.first_token_s - b.arrival_s)
        assert ttft_s == pytest.approx((2 + 1e-4 * b.input_length) / 1e3, abs=1e-9)
        assert t.finish_s > b.finish_s


@pytest.mark.parametrize("n", [1, 2, 17, 48, 49, 300])
def test_splitwise_sim_segments_are_the_generic_paths_floats(n):
    """The token table's stretch (one step looked up, summed left to right) gives exactly the floats of the
    base class's path (the table evaluated over the stretch as an array and summed by NumPy)."""
    peer = splitwise(token_phase_timing="splitwise_sim")
    for batch in (1, 7, 64, 300):
        fast = peer.decode_segment_ends(batch, 5000, n, 123.456)
        generic = PerfModel.decode_segment_ends(peer, batch, 5000, n, 123.456)
        assert len(fast) == n
        assert [float(x) for x in fast] == [float(x) for x in generic], (batch, n)
    both = splitwise(token_phase_timing="splitwise_sim", iteration_overhead="simdistserve")
    assert [float(x) for x in both.decode_segment_ends(8, 5000, n, 1.0)] == \
        [float(x) for x in PerfModel.decode_segment_ends(both, 8, 5000, n, 1.0)]
