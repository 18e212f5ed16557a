"""Every group option and experiment composes and validates; bad input is rejected naming the key."""

from __future__ import annotations

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError, ValidationError

from harness.config import validate
from systems.config import CONF_DIR
from vocab.errors import ConfigError

GROUPS = ("system", "engine", "model", "hardware", "workload", "slo", "logger", "experiment")


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


@pytest.fixture
def compose_cfg(compose):
    """The raw composed config (``validate`` is what each test exercises)."""
    return lambda overrides: compose(overrides, validated=False)


def test_required_option_names_exist():
    assert {"vllm_baseline", "mooncake", "distserve", "splitwise"} <= set(options("system"))
    assert {"sim", "vllm", "sglang", "endpoint"} <= set(options("engine"))
    assert {"mooncake_conversation", "mooncake_synthetic", "azure_code", "azure_conv", "shared_prefix"} <= set(
        options("workload"))
    for group in GROUPS:
        assert options(group), f"conf/{group}/ is empty"


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_option_composes_and_validates(compose_cfg, group, option):
    extra = ["engine.url=http://127.0.0.1:9"] if (group, option) == ("engine", "endpoint") else []
    cfg = compose_cfg([f"{group}={option}", *extra])
    typed = validate(cfg)
    if group != "experiment":
        assert getattr(typed, group).name == option


def test_default_config_types(compose_cfg):
    typed = validate(compose_cfg([]))
    assert typed.job == "serve"
    assert typed.model.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2


def test_llama3_70b_kv_bytes_per_token_is_320_kib(compose_cfg):
    typed = validate(compose_cfg(["model=llama3_70b"]))
    assert typed.model.kv_bytes_per_token == 320 * 1024


def test_unknown_key_is_rejected_with_its_name(compose_cfg):
    with pytest.raises(ConfigError, match="workload.no_such_key=3") as info:
        compose_cfg(["workload.no_such_key=3"])
    assert isinstance(info.value.__cause__, ConfigCompositionException)
    assert "no_such_key" in str(info.value.__cause__.__cause__ or info.value)


def test_unknown_top_level_key_is_rejected(compose_cfg):
    with pytest.raises(ConfigError, match="bogus") as info:
        compose_cfg(["bogus=1"])
    assert isinstance(info.value.__cause__, ConfigCompositionException)


@pytest.mark.parametrize("override,key", [("+bogus=1", "bogus"), ("+workload.zzz=1", "workload.zzz"),
                                          ("+workload.arrival.burst=2", "workload.arrival.burst")])
def test_keys_added_with_plus_are_rejected_at_validation(compose_cfg, override, key):
    with pytest.raises(ConfigError, match=rf"{key}: unknown key"):
        validate(compose_cfg([override]))


def test_wrong_type_is_rejected_with_its_name(compose_cfg):
    with pytest.raises(ConfigError) as info:
        compose_cfg(["workload.num_groups=many"])
    cause = info.value.__cause__.__cause__
    assert isinstance(cause, ValidationError | ConfigKeyError)
    assert "num_groups" in str(cause)


def test_missing_required_value_names_the_key(compose_cfg):
    cfg = compose_cfg(["engine=endpoint"])
    with pytest.raises(ConfigError, match=r"engine\.url"):
        validate(cfg)


def test_value_check_names_the_key(compose_cfg):
    cfg = compose_cfg(["system.prefill_instances=-1"])
    with pytest.raises(ConfigError, match=r"system\.prefill_instances"):
        validate(cfg)


def test_workload_value_check_names_the_key(compose_cfg):
    cfg = compose_cfg(["workload.arrival.kind=poisson", "workload.arrival.rate_rps=null"])
    with pytest.raises(ConfigError, match="rate_rps"):
        validate(cfg)


def test_experiment_overrides_groups(compose_cfg):
    typed = validate(compose_cfg(["experiment=mooncake_cache_hit"]))
    assert typed.job == "cache_study"
    assert typed.experiment_name == "mooncake_cache_hit"
    assert set(typed.cache_study.traces) == {"conversation", "synthetic"}
    assert typed.cache_study.cache_sizes[-1] is None
