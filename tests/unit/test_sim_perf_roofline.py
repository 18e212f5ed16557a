"""The roofline model: KV sizing, memory- vs compute-bound regimes, array/scalar agreement, misfit errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from omegaconf import OmegaConf

from systems.config import ModelConfig
from systems.hardware_catalog import CONF_DIR, load_hardware
from systems.sim.perf.base import InstanceShape
from systems.sim.perf.roofline import RooflineModel, kv_capacity_tokens_for, weight_bytes


def load_model(name: str) -> ModelConfig:
    node = OmegaConf.merge(OmegaConf.structured(ModelConfig), OmegaConf.load(CONF_DIR / "model" / f"{name}.yaml"))
    return OmegaConf.to_object(node)


def bare(name: str):
    """The catalog's hardware with no fixed costs, so the pure roofline terms can be checked."""
    return dataclasses.replace(load_hardware(name), iteration_overhead_ms=0.0, allreduce_latency_us=0.0)


def test_llama3_70b_kv_bytes_per_token():
    roof = RooflineModel(load_model("llama3_70b"), load_hardware("h100_80gb"), InstanceShape("h100_80gb", 4))
    assert roof.kv_bytes_per_token == 327_680


def test_kv_capacity_formula():
    model, hw = load_model("llama3_8b"), load_hardware("a100_80gb")
    got = kv_capacity_tokens_for(model, hw, InstanceShape("a100_80gb", 2), 0.9, activation_reserve_gib=1.0)
    want = (80 * 2**30 * 2 * 0.9 - weight_bytes(model) - 1.0 * 2**30 * 2) // model.kv_bytes_per_token
    assert got == want
    assert RooflineModel(model, hw, InstanceShape("a100_80gb", 2), activation_reserve_gib=1.0).kv_capacity_tokens == got


def test_weights_that_do_not_fit_name_model_hardware_and_layout():
    with pytest.raises(ValueError) as info:
        RooflineModel(load_model("llama3_70b"), load_hardware("a100_80gb"), InstanceShape("a100_80gb", 1))
    msg = str(info.value)
    for part in ("llama3_70b", "141 GB", "tp=1", "pp=1", "a100_80gb", "80 GiB x 1", "gpu_memory_utilization 0.9"):
        assert part in msg


def test_tp_must_divide_the_heads_and_shape_must_match_hardware():
    model, hw = load_model("llama2_70b"), load_hardware("a100_80gb")
    with pytest.raises(ValueError, match="tp=3"):
        RooflineModel(model, hw, InstanceShape("a100_80gb", 3))
    with pytest.raises(ValueError, match="h100_80gb"):
        RooflineModel(model, hw, InstanceShape("h100_80gb", 4))


def test_decode_small_batch_is_memory_bound():
    model, hw = load_model("llama3_8b"), bare("a100_80gb")
    roof = RooflineModel(model, hw, InstanceShape("a100_80gb", 1))
    weights_time = weight_bytes(model) / (hw.mem_bandwidth_gbps * 1e9 * hw.memory_efficiency)
    assert roof.decode_step_time_s(1, 100.0) == pytest.approx(weights_time, rel=0.01)
    # batch 1 -> 8 barely changes a memory-bound step
    assert roof.decode_step_time_s(8, 800.0) < 1.05 * roof.decode_step_time_s(1, 100.0)


def test_decode_grows_with_context():
    roof = RooflineModel(load_model("llama3_70b"), load_hardware("h100_80gb"), InstanceShape("h100_80gb", 4))
    ctx = np.array([0.0, 1e4, 1e5, 1e6])
    times = roof.decode_step_time_s(np.full(4, 64), ctx)
    assert np.all(np.diff(times) > 0)
    extra = times[-1] - times[-2]
    per_token = roof.kv_bytes_per_token / (3350e9 * load_hardware("h100_80gb").memory_efficiency * 4)
    assert extra == pytest.approx(9e5 * per_token, rel=0.01)  # KV reads dominate at large context


def test_long_prefill_is_compute_bound():
    model, hw = load_model("llama3_8b"), bare("h100_80gb")
    roof = RooflineModel(model, hw, InstanceShape("h100_80gb", 1))
    n = 8192
    rate = hw.peak_tflops_bf16 * 1e12 * hw.compute_efficiency
    flops = 2 * model.params_billion * 1e9 * n + 4 * model.num_layers * model.num_attention_heads * model.head_dim * n**2 / 2
    assert roof.prefill_time_s(n, n**2) == pytest.approx(flops / rate, rel=1e-6)
    weights_time = weight_bytes(model) / (hw.mem_bandwidth_gbps * 1e9 * hw.memory_efficiency)
    assert roof.prefill_time_s(n, n**2) > 5 * weights_time
    assert roof.prefill_time_s(0, 0) == 0.0


def test_tensor_parallel_adds_communication_and_pp_divides_stage_time():
    model, hw = load_model("llama2_70b"), load_hardware("a100_80gb")
    tp4 = RooflineModel(model, hw, InstanceShape("a100_80gb", 4))
    tp4_nocomm = RooflineModel(model, dataclasses.replace(hw, allreduce_latency_us=0.0, interconnect_gbps=1e9),
                               InstanceShape("a100_80gb", 4))
    assert tp4.prefill_time_s(4096, 4096**2) > tp4_nocomm.prefill_time_s(4096, 4096**2)
    pp1 = RooflineModel(model, hw, InstanceShape("a100_80gb", 2, 1))
    pp2 = RooflineModel(model, hw, InstanceShape("a100_80gb", 2, 2))
    assert pp2.prefill_time_s(8192, 8192**2) == pytest.approx(pp1.prefill_time_s(8192, 8192**2) / 2, rel=0.1)


def test_array_and_scalar_calls_agree():
    roof = RooflineModel(load_model("llama2_70b"), load_hardware("h100_80gb"), InstanceShape("h100_80gb", 8))
    bs = np.array([1, 4, 32, 256, 1024])
    ctx = bs * np.array([100.0, 2000.0, 500.0, 1000.0, 4000.0])
    arr = roof.decode_step_time_s(bs, ctx)
    assert isinstance(arr, np.ndarray) and arr.shape == bs.shape
    for b, c, t in zip(bs, ctx, arr, strict=True):
        assert roof.decode_step_time_s(int(b), float(c)) == pytest.approx(t, rel=1e-12)


def test_mixed_step_reads_weights_once():
    roof = RooflineModel(load_model("llama3_8b"), load_hardware("a100_80gb"), InstanceShape("a100_80gb", 1))
    pre, dec = roof.prefill_time_s(512, 512**2, 1), roof.decode_step_time_s(16, 16 * 1000.0)
    mixed = roof.mixed_step_time_s(512, 512**2, 1, 16, 16 * 1000.0)
    assert max(pre, dec) <= mixed < pre + dec


def test_scalar_decode_equals_the_vectorised_one():
    # its speed target (under 20 us per call) is a benchmark: tests/bench/test_speed_targets.py
    roof = RooflineModel(load_model("llama3_8b"), load_hardware("a100_80gb"), InstanceShape("a100_80gb", 1))
    ctx = np.array([4000.0 + i for i in range(50)])
    vector = np.asarray(roof.decode_step_time_s(np.full(50, 8.0), ctx), dtype=float)
    assert [roof.decode_step_time_s(8, float(c)) for c in ctx] == pytest.approx(vector.tolist(), rel=1e-12)
