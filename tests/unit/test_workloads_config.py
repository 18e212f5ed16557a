"""Config schemas: value checks name the key, and the schemas work as OmegaConf structured configs."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from workloads.config import (
    ArrivalConfig,
    AzureTraceConfig,
    MooncakeTraceConfig,
    SharedPrefixConfig,
    WorkloadConfig,
    missing_keys,
)
from workloads.errors import WorkloadConfigError, WorkloadError


def _shared(**kw) -> SharedPrefixConfig:
    kw.setdefault("arrival", ArrivalConfig(kind="poisson", rate_rps=2.0))
    return SharedPrefixConfig(name="sp", kind="shared_prefix", **kw)


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"kind": "poisson"}, "workload.arrival.rate_rps: required when arrival.kind=poisson"),
        ({"kind": "gamma"}, "workload.arrival.rate_rps: required when arrival.kind=gamma"),
        ({"kind": "poisson", "rate_rps": 0.0}, "workload.arrival.rate_rps"),
        ({"kind": "poisson", "rate_rps": float("inf")}, "workload.arrival.rate_rps"),
        ({"kind": "gamma", "rate_rps": 1.0, "cv": 0.0}, "workload.arrival.cv"),
        ({"time_scale": -1.0}, "workload.arrival.time_scale"),
        ({"kind": "closed_loop"}, "workload.arrival.concurrency: required when arrival.kind=closed_loop"),
        ({"kind": "closed_loop", "concurrency": 0}, "workload.arrival.concurrency"),
        ({"kind": "uniform"}, "workload.arrival.kind"),
        ({"seed": -1}, "workload.arrival.seed"),
    ],
)
def test_arrival_config_rejects_bad_values_naming_the_key(kwargs, key):
    with pytest.raises(WorkloadConfigError) as info:
        ArrivalConfig(**kwargs)
    assert str(info.value).startswith(key)
    assert isinstance(info.value, ValueError) and isinstance(info.value, WorkloadError)


def test_arrival_config_unknown_kind_lists_the_known_ones():
    with pytest.raises(WorkloadConfigError, match="trace, poisson, gamma, closed_loop"):
        ArrivalConfig(kind="uniform")


def test_valid_arrival_configs_construct():
    assert ArrivalConfig().kind == "trace"
    assert ArrivalConfig(kind="gamma", rate_rps=3, cv=2.0).rate_rps == 3
    assert ArrivalConfig(kind="closed_loop", concurrency=4).concurrency == 4


@pytest.mark.parametrize(
    ("factory", "key"),
    [
        (lambda: WorkloadConfig(name="x", kind="sharegpt"), "workload.kind"),
        (lambda: MooncakeTraceConfig(name="x", kind="azure_trace", file="f"), "workload.kind"),
        (
            lambda: MooncakeTraceConfig(name="x", kind="mooncake_trace", file="f", max_requests=0),
            "workload.max_requests",
        ),
        (
            lambda: MooncakeTraceConfig(name="x", kind="mooncake_trace", file="f", block_tokens=0),
            "workload.block_tokens",
        ),
        (
            lambda: MooncakeTraceConfig(name="x", kind="mooncake_trace", file="f", block_size=0),
            "workload.block_size",
        ),
        (lambda: MooncakeTraceConfig(name="x", kind="mooncake_trace", file=""), "workload.file"),
        (lambda: AzureTraceConfig(name="", kind="azure_trace", file="f"), "workload.name"),
        (
            lambda: AzureTraceConfig(name="x", kind="azure_trace", file="f", block_size=-5),
            "workload.block_size",
        ),
        (lambda: _shared(num_groups=0), "workload.num_groups"),
        (lambda: _shared(turns=0), "workload.turns"),
        (
            lambda: _shared(shared_prefix_len=1000),
            "workload.shared_prefix_len: must be a multiple of workload.block_size=16",
        ),
        (lambda: _shared(question_len=20), "workload.question_len"),
        (lambda: _shared(turns=2, output_len=20), "workload.output_len"),
        (lambda: _shared(zipf_alpha=-0.5), "workload.zipf_alpha"),
        (lambda: _shared(max_input_len=0), "workload.max_input_len"),
        (
            lambda: _shared(arrival=ArrivalConfig(kind="trace")),
            "workload.arrival.kind: 'trace' needs trace timestamps",
        ),
        (lambda: SharedPrefixConfig(name="sp", kind="shared_prefix"), "workload.arrival.rate_rps"),
    ],
)
def test_workload_configs_reject_bad_values_naming_the_key(factory, key):
    with pytest.raises(WorkloadConfigError) as info:
        factory()
    assert str(info.value).startswith(key)


def test_single_turn_output_len_need_not_fill_blocks():
    assert _shared(turns=1, output_len=20).output_len == 20


def test_unknown_workload_kind_lists_the_known_ones():
    with pytest.raises(WorkloadConfigError, match="mooncake_trace, azure_trace, shared_prefix"):
        WorkloadConfig(name="x", kind="sharegpt")


def test_schemas_are_structured_configs_and_shared_prefix_defaults_to_poisson():
    for cls in (MooncakeTraceConfig, AzureTraceConfig, SharedPrefixConfig):
        schema = OmegaConf.structured(cls)
        assert OmegaConf.is_missing(schema, "name") and OmegaConf.is_missing(schema, "kind")
    assert OmegaConf.structured(SharedPrefixConfig).arrival.kind == "poisson"
    assert OmegaConf.structured(MooncakeTraceConfig).arrival.kind == "trace"


def test_to_object_runs_the_checks():
    schema = OmegaConf.structured(SharedPrefixConfig)
    cfg = OmegaConf.merge(schema, {"name": "sp", "kind": "shared_prefix"})
    with pytest.raises(WorkloadConfigError, match=r"^workload\.arrival\.rate_rps"):
        OmegaConf.to_object(cfg)
    ok = OmegaConf.to_object(OmegaConf.merge(cfg, OmegaConf.from_dotlist(["arrival.rate_rps=3.5"])))
    assert isinstance(ok, SharedPrefixConfig) and ok.arrival.rate_rps == 3.5
    closed = OmegaConf.merge(
        cfg, OmegaConf.from_dotlist(["arrival.kind=closed_loop", "arrival.concurrency=4"])
    )
    obj = OmegaConf.to_object(closed)
    assert obj.arrival.kind == "closed_loop" and obj.arrival.rate_rps is None


def test_missing_keys_lists_nested_missing_values():
    cfg = MooncakeTraceConfig(name="x")
    assert missing_keys(cfg) == ["workload.kind", "workload.file"]
    assert missing_keys(MooncakeTraceConfig(name="x", kind="mooncake_trace", file="f")) == []
