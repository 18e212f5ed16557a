"""Typed configuration: the root schema every run composes onto, and its validation.

The schemas of what is deployed live with the systems (``systems/config.py``: system, model, hardware;
``systems/engine_config.py``: engines), the workloads' with the workloads (``workloads/config.py``);
the harness's own (SLO, validity, logger, studies, sweeps) are here or next to their code. Hydra
composes YAML over these dataclasses, so an unknown key or a value of the wrong type is rejected during
composition, naming the key. :func:`validate` then turns the composed tree into dataclass instances,
which runs each dataclass's ``__post_init__`` checks, and checks the rules that span groups: the
system's topology against the engine (:func:`systems.topology.check_deployment`), the GPU budget on
every engine (:func:`systems.gpu_budget.check_gpu_budget`) and the job's own requirements. Every failure is one :class:`~vocab.errors.ConfigError` naming the key, before any work.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from harness.slo import SLOConfig
from harness.validity import ValidityConfig
from systems.config import CONF_DIR, HardwareConfig, ModelConfig, SystemConfig
from systems.engine_config import ENGINE_SCHEMAS
from systems.gpu_budget import check_gpu_budget
from systems.topology import check_deployment
from vocab.errors import ConfigError
from workloads.config import (
    RATE_RPS_RANGE,
    AzureTraceConfig,
    DistServeRequestsConfig,
    MooncakeTraceConfig,
    SharedPrefixConfig,
    ShareGPTLengthsConfig,
)
from workloads.load_point import RATE_ARRIVALS

JOBS = ("serve", "cache_study", "workload", "sim_study", "compare", "calibrate", "sim_vs_real")
# Keys renamed so that "capacity", "placement" and "cluster" each mean one thing (docs/architecture.md, "Words"):
# a config or command line that still uses an old key is refused with the new key's name.
RENAMED_KEYS = {
    "sweep.capacity_fractions": "sweep.saturation_fractions",
    "sweep.capacity_concurrency": "sweep.saturation_concurrency",
    "sweep.capacity_requests": "sweep.saturation_requests",
    "engine.placement": "engine.hosting",
    "engine.placement_rules": "engine.hosting_rules",
    "cache_study.capacities": "cache_study.cache_sizes",
    "cache_study.global_local.capacities_per_instance": "cache_study.global_local.cache_sizes_per_instance",
}


@dataclass
class LoggerConfig:
    """Where results are published besides the run folder."""

    name: str = "none"  # none | wandb
    project: str = "disagg-bench"
    entity: Optional[str] = None
    mode: Optional[str] = None  # online | offline; None = online when an API key is set, else offline
    tags: list[str] = field(default_factory=list)
    group: Optional[str] = None  # W&B run group; None = experiment_name (so a sweep's jobs form one group)

    def __post_init__(self) -> None:
        if self.name not in ("none", "wandb"):
            raise ConfigError(f"logger.name: expected none or wandb, got {self.name!r}")
        if self.mode not in (None, "online", "offline"):
            raise ConfigError(f"logger.mode: expected online, offline or null, got {self.mode!r}")


@dataclass
class GlobalLocalConfig:
    """Global pool vs private caches (Mooncake's global cache argument)."""

    n_instances: int = 8
    cache_sizes_per_instance: list[int] = field(default_factory=lambda: [1000, 10000])
    routings: list[str] = field(default_factory=lambda: ["random", "round_robin", "cache_aware"])
    policy: str = "lru"


@dataclass
class CacheStudyConfig:
    """The prefix-cache study: trace hash ids replayed through block caches."""

    traces: dict[str, str] = field(default_factory=dict)  # label -> trace file (data-dir relative)
    block_size: int = 512
    strict: bool = True
    cache_sizes: list[Optional[int]] = field(default_factory=lambda: [1000, 10000, 30000, 50000, 100000, None])
    policies: list[str] = field(default_factory=lambda: ["lru", "lfu", "length_aware"])
    global_local: GlobalLocalConfig = field(default_factory=GlobalLocalConfig)

    def __post_init__(self) -> None:
        for cap in self.cache_sizes:
            if cap is not None and cap <= 0:
                raise ConfigError(f"cache_study.cache_sizes: cache sizes (blocks) must be > 0 or null (infinite), got {cap}")
        if self.global_local.n_instances < 1:
            raise ConfigError("cache_study.global_local.n_instances: must be >= 1")


@dataclass
class SweepConfig:
    """Measured points of one serving job, run on one deployment (prefix cache reset between them)."""

    rates_rps: list[float] = field(default_factory=list)  # empty: one point at the workload's own arrivals
    # real engines: measure the deployment's saturation rate on this host first (a closed loop of saturation_requests
    # requests, saturation_concurrency in flight), then offer these fractions of it (harness/host_saturation.py)
    saturation_fractions: list[float] = field(default_factory=list)
    saturation_concurrency: int = 16
    saturation_requests: int = 64
    point_duration_s: float = 20.0  # points sized to the saturation rate: rate x this many requests, within the bounds below
    min_point_requests: int = 40
    max_point_requests: int = 400

    def __post_init__(self) -> None:
        low, high = RATE_RPS_RANGE  # the range workload.arrival.rate_rps accepts
        for rate in self.rates_rps:
            if not low <= rate <= high:  # also refuses nan
                raise ConfigError(f"sweep.rates_rps: rates must be in [{low:g}, {high:g}] req/s, got {rate}")
        for fraction in self.saturation_fractions:
            if not 0 < fraction <= 2:
                raise ConfigError(f"sweep.saturation_fractions: fractions of the measured saturation rate must be in (0, 2], "
                                  f"got {fraction}")
        if self.saturation_fractions and self.rates_rps:
            raise ConfigError("sweep: give sweep.rates_rps (fixed rates, for the simulator) or sweep.saturation_fractions "
                              "(fractions of the saturation rate measured on this host), not both")
        for key in ("saturation_concurrency", "saturation_requests", "min_point_requests", "max_point_requests"):
            if getattr(self, key) < 1:
                raise ConfigError(f"sweep.{key}: must be >= 1, got {getattr(self, key)}")
        if self.saturation_requests < 3 * self.saturation_concurrency:
            raise ConfigError(f"sweep.saturation_requests: needs at least 3 x sweep.saturation_concurrency "
                              f"({3 * self.saturation_concurrency}) so that a steady stretch is measured, got "
                              f"{self.saturation_requests}")
        if not 0 < self.point_duration_s < math.inf:
            raise ConfigError(f"sweep.point_duration_s: must be a finite number > 0, got {self.point_duration_s}")
        if self.min_point_requests > self.max_point_requests:
            raise ConfigError(f"sweep.min_point_requests ({self.min_point_requests}) exceeds sweep.max_point_requests "
                              f"({self.max_point_requests})")


@dataclass
class CalibrateConfig:
    """``job=calibrate``: the cells profiled on a real instance (``harness/calibrate/``)."""

    prompt_lengths: list[int] = field(default_factory=lambda: [64, 256, 512, 1024, 1536, 2048])  # prefill cells
    prefill_batches: list[int] = field(default_factory=lambda: [1, 2, 4])  # only those fitting one iteration
    decode_batches: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    decode_contexts: list[int] = field(default_factory=lambda: [128, 512, 1024, 2048])
    decode_tokens: int = 32  # output tokens of every decode cell
    repeats: int = 3  # every cell, interleaved
    kv_transfer: bool = True  # also profile the P->D KV transfer on a 1P+1D deployment
    transfer_lengths: list[int] = field(default_factory=lambda: [256, 512, 1024, 2048])
    profile_out: Optional[str] = None  # also copy profile.json here

    def __post_init__(self) -> None:
        for key in ("prompt_lengths", "prefill_batches", "decode_batches", "decode_contexts", "transfer_lengths"):
            values = getattr(self, key)
            if not values and key != "transfer_lengths":
                raise ConfigError(f"calibrate.{key}: needs at least one value")
            if any(not isinstance(v, int) or v < 1 for v in values):
                raise ConfigError(f"calibrate.{key}: values must be integers >= 1, got {list(values)}")
        if self.decode_tokens < 4:
            raise ConfigError(f"calibrate.decode_tokens: must be >= 4 (the decode steps are the gaps between them), "
                              f"got {self.decode_tokens}")
        if self.repeats < 1:
            raise ConfigError(f"calibrate.repeats: must be >= 1, got {self.repeats}")
        # enough distinct measurements for each fit: a coefficient each, plus one (repeats of a prefill or decode
        # cell are reduced to their median; every KV transfer is a sample of its own)
        if len(set(self.prompt_lengths)) < 3:
            raise ConfigError(f"calibrate.prompt_lengths: the prefill fit needs at least 3 different lengths, got "
                              f"{list(self.prompt_lengths)}")
        if len(set(self.decode_contexts)) * len(set(self.decode_batches)) < 4:
            raise ConfigError("calibrate.decode_contexts x calibrate.decode_batches: the decode fit needs at least 4 "
                              f"cells, got {list(self.decode_contexts)} x {list(self.decode_batches)}")
        if self.kv_transfer and len(self.transfer_lengths) * self.repeats < 3:
            raise ConfigError("calibrate.transfer_lengths x calibrate.repeats: the KV-transfer fit needs at least 3 "
                              f"transfers, got {len(self.transfer_lengths)} length(s) x {self.repeats} repeat(s)")


@dataclass
class SimVsRealConfig:
    """``job=sim_vs_real``: every ``study.variants`` design served on real processes, then simulated with a fitted
    profile on the very same requests (``harness/calibrate/sim_vs_real.py``)."""

    profile: Optional[str] = None  # a calibrate job's profile.json; null: calibrate first, in <job>/calibrate/
    sim_overrides: list[str] = field(default_factory=lambda: [
        "engine=sim", "engine.perf_model=fitted", "engine.kv_link=profile", "engine.max_num_batched_tokens=2048",
        "engine.max_num_seqs=64", "engine.progress=false"])
    design_sim_overrides: dict[str, list[str]] = field(default_factory=dict)  # label -> extra simulator overrides
    goals: dict[str, float] = field(default_factory=lambda: {"colocated": 0.10, "disaggregated": 0.15})
    goal_metrics: list[str] = field(default_factory=lambda: ["median_ttft_ms", "median_tpot_ms"])

    def __post_init__(self) -> None:
        for key in ("colocated", "disaggregated"):
            if key not in self.goals or not 0 < self.goals[key] < 10:
                raise ConfigError(f"sim_vs_real.goals.{key}: a relative error in (0, 10) is required, "
                                  f"got {self.goals.get(key)!r}")


STUDIES = ("sim_sweep", "splitwise_provisioning", "placement_search", "real_replay")


@dataclass
class StudyConfig:
    """``job=sim_study``: many simulations in one job, written as one tidy table (``study.csv``).

    ``kind`` picks the study; ``variants`` maps a label to the Hydra overrides composing that deployment
    (on top of the job's own overrides); the load points are the Poisson ``rates_rps`` (whole cluster),
    ``per_gpu_rates`` (times each variant's GPU count) or trace ``speedups`` (arrival.time_scale = 1/speedup).
    """

    kind: str = "sim_sweep"  # sim_sweep | splitwise_provisioning | placement_search | real_replay
    figure: str = ""  # which figure the study's table feeds (figures/sim_studies.py)
    variants: dict[str, list[str]] = field(default_factory=dict)
    rates_rps: list[float] = field(default_factory=list)
    per_gpu_rates: list[float] = field(default_factory=list)
    speedups: list[float] = field(default_factory=list)
    tbt_thresholds_ms: list[float] = field(default_factory=list)  # extra attainment columns, one per TBT bound
    slo_scales: list[float] = field(default_factory=list)  # sim_sweep: attainment with every bound scaled by each
    max_requests: Optional[int] = None
    write_requests: bool = True  # sim_sweep: false leaves out requests.parquet (every record of every point)
    params: dict[str, Any] = field(default_factory=dict)  # study-specific settings (documented per study)

    def __post_init__(self) -> None:
        if self.kind not in STUDIES:
            raise ConfigError(f"study.kind: expected one of {', '.join(STUDIES)}, got {self.kind!r}")
        for key in ("rates_rps", "per_gpu_rates", "speedups", "tbt_thresholds_ms", "slo_scales"):
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
    overwrite: bool = False  # true: replace the results already in the job folder (else the job refuses it)
    dry_run: bool = False  # true: list the jobs (a sweep: which would run, be skipped or refused) and run nothing
    figures: bool = True  # false: the job draws no figures (its tables are written; python -m figures draws them later)
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
    calibrate: CalibrateConfig = field(default_factory=CalibrateConfig)
    sim_vs_real: SimVsRealConfig = field(default_factory=SimVsRealConfig)

    def __post_init__(self) -> None:
        if self.job not in JOBS:
            raise ConfigError(f"job: expected one of {', '.join(JOBS)}, got {self.job!r}")


WORKLOAD_SCHEMAS = {
    "_schema_mooncake_trace": MooncakeTraceConfig,
    "_schema_azure_trace": AzureTraceConfig,
    "_schema_shared_prefix": SharedPrefixConfig,
    "_schema_sharegpt_lengths": ShareGPTLengthsConfig,
    "_schema_distserve_requests": DistServeRequestsConfig,
}


def register_configs(store: ConfigStore | None = None) -> None:
    """Register the schemas with Hydra's ConfigStore (idempotent)."""
    from harness.sweep.naming import register_resolver

    register_resolver()  # ${job_dirname:...} in hydra.sweep.subdir
    cs = store or ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    for name, schema in WORKLOAD_SCHEMAS.items():
        cs.store(group="workload", name=name, node=schema)
    for name, schema in ENGINE_SCHEMAS.items():
        cs.store(group="engine", name=name, node=schema)


def renamed_key_message(text: str) -> Optional[str]:
    """One line for an error whose text names a key of :data:`RENAMED_KEYS` (None when it names none)."""
    for old in sorted(RENAMED_KEYS, key=len, reverse=True):
        if re.search(rf"(?<![\w.]){re.escape(old)}(?!\w)", text):
            return f"{old}: renamed to {RENAMED_KEYS[old]} (docs/architecture.md says what each word means)"
    return None


def check_unknown_keys(node: DictConfig, path: str = "") -> None:
    """Reject keys a schema does not declare (Hydra's ``+key=value`` bypasses struct mode); an old name of a
    renamed key is named with its new one."""
    schema = OmegaConf.get_type(node)
    if dataclasses.is_dataclass(schema):
        known = {f.name for f in dataclasses.fields(schema)}
        for key in node:
            if key not in known:
                name = f"{path}.{key}" if path else str(key)
                renamed = renamed_key_message(name)
                if renamed is not None:
                    raise ConfigError(renamed)
                raise ConfigError(f"{name}: unknown key; {schema.__name__} accepts {', '.join(sorted(known))}")
    for key in node:
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
            check_unknown_keys(child, f"{path}.{key}" if path else str(key))


def check_config(config: Config) -> None:
    """The rules that span config groups: the deployment's topology on its engine, and what the job needs."""
    check_deployment(config.system, config.engine.name)
    check_gpu_budget(config.system, config.engine, config.hardware)
    if config.job == "serve" and config.sweep.rates_rps:
        kind = config.workload.arrival.kind
        if kind not in RATE_ARRIVALS:
            raise ConfigError(f"sweep.rates_rps: sets the rate of a {' or '.join(RATE_ARRIVALS)} arrival process, but "
                              f"workload.arrival.kind={kind} (workload={config.workload.name}); to replay its requests at "
                              "each rate add workload.arrival.kind=poisson workload.arrival.rate_rps=1 (each point "
                              "replaces the rate)")


def validate(cfg: DictConfig) -> Config:
    """Turn the composed config into dataclasses and check it, raising ``ConfigError`` that names the bad key."""
    config = to_config(cfg)
    check_config(config)
    return config


def to_config(cfg: DictConfig) -> Config:
    """The composed config as dataclasses (each schema's own checks run); ``ConfigError`` naming the key."""
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


def compose_config(overrides: Sequence[str], conf_dir: Path = CONF_DIR) -> DictConfig:
    """``conf/config.yaml`` composed with ``overrides``, exactly as ``python -m harness <overrides>`` would
    (unvalidated: :func:`validate` turns it into a :class:`Config`). Inside a running Hydra app the app's
    config search path is used. ``ConfigError`` naming the overrides when Hydra cannot compose them."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    register_configs()
    try:
        if GlobalHydra.instance().is_initialized():
            return compose(config_name="config", overrides=list(overrides))
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            return compose(config_name="config", overrides=list(overrides))
    except HydraException as exc:
        renamed = renamed_key_message(f"{exc} {exc.__cause__ or ''}")
        raise ConfigError(renamed or f"{list(overrides)}: {exc}") from exc
