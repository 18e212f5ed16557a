"""Typed configuration: the structured-config schemas behind every ``conf/`` group.

Hydra composes YAML over these dataclasses, so an unknown key or a value of the wrong type is
rejected during composition, naming the key. ``validate`` then turns the composed tree into
dataclass instances, which catches missing required values (``???``) and the value checks in each
dataclass's ``__post_init__`` before any work starts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from harness.engine_config import ENGINE_SCHEMAS
from harness.slo import SLOConfig
from harness.validity import ValidityConfig
from workloads.config import AzureTraceConfig, MooncakeTraceConfig, SharedPrefixConfig

SYSTEMS = ("vllm_baseline", "mooncake", "distserve", "splitwise")
JOBS = ("serve", "cache_study", "workload", "sim_study", "compare")


class ConfigError(ValueError):
    """A configuration value is missing or invalid; the message names the key."""


@dataclass
class SystemConfig:
    """Which deployment design runs, and how many instances of each role it has."""

    name: str = MISSING
    description: str = ""
    colocated_instances: int = 0  # vLLM-style instances doing prefill and decode
    prefill_instances: int = 0
    decode_instances: int = 0
    mixed_instances: int = 0  # Splitwise's mixed pool: instances that run both phases and take overflow
    router: str = "round_robin"  # routing policy name
    gpu_budget: Optional[int] = None  # GPUs the deployment may use (checked by the simulator); None: unlimited
    prefix_caching: bool = True

    def __post_init__(self) -> None:
        if self.name not in SYSTEMS:
            raise ConfigError(f"system.name: expected one of {', '.join(SYSTEMS)}, got {self.name!r}")
        for key in ("colocated_instances", "prefill_instances", "decode_instances", "mixed_instances"):
            if getattr(self, key) < 0:
                raise ConfigError(f"system.{key}: must be >= 0, got {getattr(self, key)}")
        if self.colocated_instances + self.prefill_instances + self.decode_instances == 0:
            raise ConfigError("system: at least one of colocated_instances, prefill_instances, decode_instances must be > 0")

    @property
    def n_instances(self) -> int:
        return self.colocated_instances + self.prefill_instances + self.decode_instances + self.mixed_instances


@dataclass
class ModelConfig:
    """Model shape (enough for KV sizing and performance models) and where its weights live."""

    name: str = MISSING
    path: Optional[str] = None  # local checkpoint folder (synthetic models: where the build is cached)
    synthetic: bool = False  # True: built locally with random weights and a local tokenizer (tiny_llama)
    num_layers: int = MISSING
    hidden_size: int = MISSING
    num_attention_heads: int = MISSING
    num_kv_heads: int = MISSING
    head_dim: int = MISSING
    intermediate_size: int = MISSING
    vocab_size: int = MISSING
    max_model_len: int = MISSING
    params_billion: float = MISSING
    kv_dtype_bytes: int = 2
    special_token_ids: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        for key in ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim",
                    "vocab_size", "max_model_len", "kv_dtype_bytes"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"model.{key}: must be > 0, got {getattr(self, key)}")
        if self.num_attention_heads % self.num_kv_heads:
            raise ConfigError("model.num_kv_heads: must divide model.num_attention_heads")

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V for every layer and KV head (GQA-aware)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.kv_dtype_bytes


@dataclass
class HardwareConfig:
    """One accelerator (or CPU host) type. Figures come from vendor data sheets (cited in the YAML).

    The efficiency, latency and overhead keys feed the simulator's roofline model
    (``systems/sim/perf/roofline.py``); the YAML states where each number comes from.
    """

    name: str = MISSING
    kind: str = "gpu"  # gpu | cpu
    peak_tflops_bf16: float = MISSING  # dense
    mem_bandwidth_gbps: float = MISSING  # GB/s
    mem_gib: float = MISSING
    devices_per_node: int = 1
    power_w: Optional[float] = None  # per device (TDP, or the cap of a power-capped part)
    price_per_hour_usd: Optional[float] = None  # per device
    interconnect_gbps: Optional[float] = None  # intra-node GB/s per device, bidirectional (as data sheets quote)
    compute_efficiency: float = 0.6  # achievable fraction of peak_tflops_bf16 in dense GEMMs
    memory_efficiency: float = 0.8  # achievable fraction of mem_bandwidth_gbps when streaming weights/KV
    interconnect_efficiency: float = 0.7  # achievable fraction of interconnect_gbps in an all-reduce
    allreduce_latency_us: float = 10.0  # fixed cost of one all-reduce per log2(tp) step
    iteration_overhead_ms: float = 0.0  # fixed cost of one engine iteration (scheduling, launches, sampling)

    def __post_init__(self) -> None:
        if self.kind not in ("gpu", "cpu"):
            raise ConfigError(f"hardware.kind: expected gpu or cpu, got {self.kind!r}")
        for key in ("peak_tflops_bf16", "mem_bandwidth_gbps", "mem_gib", "devices_per_node"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"hardware.{key}: must be > 0, got {getattr(self, key)}")
        for key in ("power_w", "price_per_hour_usd", "interconnect_gbps"):
            value = getattr(self, key)
            if value is not None and value <= 0:
                raise ConfigError(f"hardware.{key}: must be > 0 or null, got {value}")
        for key in ("compute_efficiency", "memory_efficiency", "interconnect_efficiency"):
            value = getattr(self, key)
            if not 0 < value <= 1:
                raise ConfigError(f"hardware.{key}: must be in (0, 1] (a fraction of the peak), got {value}")
        for key in ("allreduce_latency_us", "iteration_overhead_ms"):
            if getattr(self, key) < 0:
                raise ConfigError(f"hardware.{key}: must be >= 0, got {getattr(self, key)}")


@dataclass
class LoggerConfig:
    """Where results are published besides the run folder."""

    name: str = "none"  # none | wandb
    project: str = "disagg-bench"
    entity: Optional[str] = None
    mode: Optional[str] = None  # online | offline; None = online when an API key is set, else offline
    tags: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.name not in ("none", "wandb"):
            raise ConfigError(f"logger.name: expected none or wandb, got {self.name!r}")
        if self.mode not in (None, "online", "offline"):
            raise ConfigError(f"logger.mode: expected online, offline or null, got {self.mode!r}")


@dataclass
class GlobalLocalConfig:
    """Global pool vs private caches (Mooncake's global cache argument)."""

    n_instances: int = 8
    capacities_per_instance: list[int] = field(default_factory=lambda: [1000, 10000])
    routings: list[str] = field(default_factory=lambda: ["random", "round_robin", "cache_aware"])
    policy: str = "lru"


@dataclass
class CacheStudyConfig:
    """The prefix-cache study: trace hash ids replayed through block caches."""

    traces: dict[str, str] = field(default_factory=dict)  # label -> trace file (data-dir relative)
    block_size: int = 512
    strict: bool = True
    capacities: list[Optional[int]] = field(default_factory=lambda: [1000, 10000, 30000, 50000, 100000, None])
    policies: list[str] = field(default_factory=lambda: ["lru", "lfu", "length_aware"])
    global_local: GlobalLocalConfig = field(default_factory=GlobalLocalConfig)

    def __post_init__(self) -> None:
        for cap in self.capacities:
            if cap is not None and cap <= 0:
                raise ConfigError(f"cache_study.capacities: capacities must be > 0 or null (infinite), got {cap}")
        if self.global_local.n_instances < 1:
            raise ConfigError("cache_study.global_local.n_instances: must be >= 1")


@dataclass
class SweepConfig:
    """Measured points of one serving job, run on one deployment (prefix cache reset between them)."""

    rates_rps: list[float] = field(default_factory=list)  # empty: one point at the workload's own arrivals

    def __post_init__(self) -> None:
        for rate in self.rates_rps:
            if rate <= 0:
                raise ConfigError(f"sweep.rates_rps: rates must be > 0, got {rate}")


STUDIES = ("sim_sweep", "splitwise_provisioning", "placement_search")


@dataclass
class StudyConfig:
    """``job=sim_study``: many simulations in one job, written as one tidy table (``study.csv``).

    ``kind`` picks the study; ``variants`` maps a label to the Hydra overrides composing that deployment
    (on top of the job's own overrides); the load points are the Poisson ``rates_rps`` (whole cluster),
    ``per_gpu_rates`` (times each variant's GPU count) or trace ``speedups`` (arrival.time_scale = 1/speedup).
    """

    kind: str = "sim_sweep"  # sim_sweep | splitwise_provisioning | placement_search
    figure: str = ""  # which figure the study's table feeds (figures/sim_studies.py)
    variants: dict[str, list[str]] = field(default_factory=dict)
    rates_rps: list[float] = field(default_factory=list)
    per_gpu_rates: list[float] = field(default_factory=list)
    speedups: list[float] = field(default_factory=list)
    tbt_thresholds_ms: list[float] = field(default_factory=list)  # extra attainment columns, one per TBT bound
    max_requests: Optional[int] = None
    params: dict[str, Any] = field(default_factory=dict)  # study-specific settings (documented per study)

    def __post_init__(self) -> None:
        if self.kind not in STUDIES:
            raise ConfigError(f"study.kind: expected one of {', '.join(STUDIES)}, got {self.kind!r}")
        for key in ("rates_rps", "per_gpu_rates", "speedups", "tbt_thresholds_ms"):
            for value in getattr(self, key):
                if not value > 0:
                    raise ConfigError(f"study.{key}: values must be > 0, got {value}")
        if sum(bool(getattr(self, k)) for k in ("rates_rps", "per_gpu_rates", "speedups")) > 1:
            raise ConfigError("study: give only one of rates_rps, per_gpu_rates and speedups")
        if self.max_requests is not None and self.max_requests < 1:
            raise ConfigError(f"study.max_requests: must be >= 1, got {self.max_requests}")


@dataclass
class Config:
    """The whole run configuration (``conf/config.yaml`` composes onto this)."""

    job: str = "serve"
    experiment_name: str = "default"
    results_dir: str = "results"
    data_dir: Optional[str] = None
    seed: int = 0
    system: SystemConfig = MISSING
    engine: Any = MISSING  # one of the engine schemas, chosen by the engine group
    model: ModelConfig = MISSING
    hardware: HardwareConfig = MISSING
    workload: Any = MISSING  # one of the workload schemas, chosen by the workload group
    slo: SLOConfig = MISSING
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    validity: ValidityConfig = field(default_factory=ValidityConfig)
    cache_study: CacheStudyConfig = field(default_factory=CacheStudyConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    study: StudyConfig = field(default_factory=StudyConfig)

    def __post_init__(self) -> None:
        if self.job not in JOBS:
            raise ConfigError(f"job: expected one of {', '.join(JOBS)}, got {self.job!r}")


WORKLOAD_SCHEMAS = {
    "_schema_mooncake_trace": MooncakeTraceConfig,
    "_schema_azure_trace": AzureTraceConfig,
    "_schema_shared_prefix": SharedPrefixConfig,
}


def register_configs(store: ConfigStore | None = None) -> None:
    """Register the schemas with Hydra's ConfigStore (idempotent)."""
    cs = store or ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    for name, schema in WORKLOAD_SCHEMAS.items():
        cs.store(group="workload", name=name, node=schema)
    for name, schema in ENGINE_SCHEMAS.items():
        cs.store(group="engine", name=name, node=schema)


def check_unknown_keys(node: DictConfig, path: str = "") -> None:
    """Reject keys a schema does not declare (Hydra's ``+key=value`` bypasses struct mode)."""
    schema = OmegaConf.get_type(node)
    if dataclasses.is_dataclass(schema):
        known = {f.name for f in dataclasses.fields(schema)}
        for key in node:
            if key not in known:
                name = f"{path}.{key}" if path else str(key)
                raise ConfigError(f"{name}: unknown key; {schema.__name__} accepts {', '.join(sorted(known))}")
    for key in node:
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
            check_unknown_keys(child, f"{path}.{key}" if path else str(key))


def validate(cfg: DictConfig) -> Config:
    """Turn the composed config into dataclasses, raising ``ConfigError`` that names the bad key."""
    check_unknown_keys(cfg)
    try:
        return OmegaConf.to_object(cfg)  # type: ignore[return-value]
    except MissingMandatoryValue as exc:
        raise ConfigError(f"{exc.full_key}: missing required value (set it on the command line, e.g. {exc.full_key}=...)") from exc
    except OmegaConfBaseException as exc:
        cause = exc.__cause__ if isinstance(exc.__cause__, ValueError) else None
        if cause is not None:
            raise ConfigError(str(cause)) from exc
        raise ConfigError(f"{getattr(exc, 'full_key', '') or 'config'}: {getattr(exc, 'msg', exc)}") from exc
    except ConfigError:
        raise
    except ValueError as exc:  # value checks in the schemas' __post_init__ (they name the key)
        raise ConfigError(str(exc)) from exc
