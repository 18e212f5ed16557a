"""The attention-efficiency calibration (benchmarks.attention_calibration): the FLOP count and fit on rows with
known answers, the shipped A800 value against the shared A100 profile, and the roofline using it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from benchmarks.attention_calibration import (
    DEFAULT_PROFILE,
    chunk_table,
    fitted_efficiency,
    main,
    prefill_rows,
)
from systems.config import HardwareConfig
from vocab.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def rows(times_ms: list[float], chunks: list[int], prefixes: list[int]) -> pd.DataFrame:
    return pd.DataFrame({"n_q_head": 64, "n_embd": 8192, "num_tensor_parallel_workers": 2, "batch_size": 1,
                         "prefill_chunk_size": chunks, "kv_cache_size": prefixes, "is_prefill": True,
                         "time_stats.attn_prefill.median": times_ms})


def test_flops_follow_the_causal_pairs_and_the_fit_is_flop_weighted():
    # 32 heads x 128 per GPU: 4 * 4096 = 16,384 FLOPs per pair; 512 over 1,024: 512 * (1024 + 256) pairs
    table = prefill_rows(rows([1.0, 2.0], [512, 512], [1024, 0]), peak_tflops=100.0)
    assert table["flops"].tolist() == pytest.approx([16384 * 512 * 1280, 16384 * 512 * 256])
    assert table["efficiency"].iloc[0] == pytest.approx(16384 * 512 * 1280 / 1e-3 / 100e12)
    total = table["flops"].sum() / table["time_s"].sum() / 100e12
    assert fitted_efficiency(table) == pytest.approx(total)
    out = chunk_table(table, 512, {"half": 0.5}, 100.0)
    assert out["prefix"].tolist() == [0, 1024]
    assert out["roofline_half_ms"].iloc[1] == pytest.approx(16384 * 512 * 1280 / 50e12 * 1e3)


def test_a_profile_without_the_needed_columns_is_refused():
    with pytest.raises(ValueError, match="no column kv_cache_size"):
        prefill_rows(rows([1.0], [512], [0]).drop(columns="kv_cache_size"), 100.0)


@pytest.mark.skipif(not DEFAULT_PROFILE.is_file(), reason="../shared/perf_profiles is not here")
def test_the_a800_attention_efficiency_is_the_fit_of_the_shared_a100_profile(capsys):
    hw = yaml.safe_load((REPO / "conf" / "hardware" / "a800_80gb.yaml").read_text())
    fit = fitted_efficiency(prefill_rows(pd.read_csv(DEFAULT_PROFILE), float(hw["peak_tflops_bf16"])))
    assert hw["attention_efficiency"] == round(fit, 2)
    assert hw["attention_efficiency"] < hw["compute_efficiency"]
    assert main([]) == 0
    assert "fitted attention_efficiency" in capsys.readouterr().out


def test_the_roofline_prices_attention_at_the_hardwares_attention_efficiency():
    from systems.config import ModelConfig
    from systems.sim.perf.base import InstanceShape
    from systems.sim.perf.roofline import RooflineModel

    model = ModelConfig(name="m", params_billion=1.0, num_layers=4, hidden_size=1024, num_attention_heads=8,
                        num_kv_heads=8, head_dim=128, vocab_size=32000, max_model_len=8192)
    base = dict(name="h", peak_tflops_bf16=100.0, mem_bandwidth_gbps=1e6, mem_gib=80)
    slow, plain = HardwareConfig(**base, attention_efficiency=0.1), HardwareConfig(**base)
    shape = InstanceShape(hardware="h", tp=1, pp=1)
    long_prompt = 4096.0
    t_slow = RooflineModel(model, slow, shape).prefill_time_s(long_prompt, long_prompt ** 2)
    t_plain = RooflineModel(model, plain, shape).prefill_time_s(long_prompt, long_prompt ** 2)
    assert t_slow > t_plain  # attention FLOPs at 0.1 instead of compute_efficiency 0.6
    with pytest.raises(ConfigError, match="hardware.attention_efficiency"):
        HardwareConfig(**base, attention_efficiency=1.5)
