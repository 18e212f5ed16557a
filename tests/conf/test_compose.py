"""Every group option and experiment composes and validates; bad input is rejected naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError, ValidationError

from harness.config import register_configs, validate
from harness.errors import ConfigError

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
GROUPS = ("system", "engine", "model", "hardware", "workload", "slo", "logger", "experiment")


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def compose_cfg(overrides: list[str]):
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def test_required_option_names_exist():
    assert {"vllm_baseline", "mooncake", "distserve", "splitwise"} <= set(options("system"))
    assert {"sim", "vllm", "sglang", "endpoint"} <= set(options("engine"))
    assert {"mooncake_conversation", "mooncake_synthetic", "azure_code", "azure_conv", "shared_prefix"} <= set(
        options("workload"))
    for group in GROUPS:
        assert options(group), f"conf/{group}/ is empty"


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_option_composes_and_validates(group, option):
    extra = ["engine.url=http://127.0.0.1:9"] if (group, option) == ("engine", "endpoint") else []
    cfg = compose_cfg([f"{group}={option}", *extra])
    typed = validate(cfg)
    if group != "experiment":
        assert getattr(typed, group).name == option


def test_default_config_types():
    typed = validate(compose_cfg([]))
    assert typed.job == "serve"
    assert typed.model.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2


def test_llama3_70b_kv_bytes_per_token_is_320_kib():
    typed = validate(compose_cfg(["model=llama3_70b"]))
    assert typed.model.kv_bytes_per_token == 320 * 1024


def test_unknown_key_is_rejected_with_its_name():
    with pytest.raises(ConfigCompositionException) as info:
        compose_cfg(["workload.no_such_key=3"])
    assert "no_such_key" in str(info.value.__cause__ or info.value)


def test_unknown_top_level_key_is_rejected():
    with pytest.raises(ConfigCompositionException) as info:
        compose_cfg(["bogus=1"])
    assert "bogus" in str(info.value.__cause__ or info.value)


@pytest.mark.parametrize("override,key", [("+bogus=1", "bogus"), ("+workload.zzz=1", "workload.zzz"),
                                          ("+workload.arrival.burst=2", "workload.arrival.burst")])
def test_keys_added_with_plus_are_rejected_at_validation(override, key):
    with pytest.raises(ConfigError, match=rf"{key}: unknown key"):
        validate(compose_cfg([override]))


def test_wrong_type_is_rejected_with_its_name():
    with pytest.raises(ConfigCompositionException) as info:
        compose_cfg(["workload.num_groups=many"])
    cause = info.value.__cause__
    assert isinstance(cause, ValidationError | ConfigKeyError)
    assert "num_groups" in str(cause)


def test_missing_required_value_names_the_key():
    cfg = compose_cfg(["engine=endpoint"])
    with pytest.raises(ConfigError, match=r"engine\.url"):
        validate(cfg)


def test_value_check_names_the_key():
    cfg = compose_cfg(["system.prefill_instances=-1"])
    with pytest.raises(ConfigError, match=r"system\.prefill_instances"):
        validate(cfg)


def test_workload_value_check_names_the_key():
    cfg = compose_cfg(["workload.arrival.kind=poisson", "workload.arrival.rate_rps=null"])
    with pytest.raises(ConfigError, match="rate_rps"):
        validate(cfg)


def test_experiment_overrides_groups():
    typed = validate(compose_cfg(["experiment=mooncake_cache_hit"]))
    assert typed.job == "cache_study"
    assert typed.experiment_name == "mooncake_cache_hit"
    assert set(typed.cache_study.traces) == {"conversation", "synthetic"}
    assert typed.cache_study.capacities[-1] is None
