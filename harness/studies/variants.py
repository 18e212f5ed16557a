"""Composing the deployments a study compares: each variant is a list of Hydra overrides applied on
top of the job's own command line, exactly what ``python -m harness <overrides>`` would compose, so
any variant can be rerun on its own as a serving job.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.config import Config, compose_config, validate
from systems.engine_config import SimEngineConfig, VllmEngineConfig
from vocab.errors import ConfigError


def job_overrides() -> list[str]:
    """The running Hydra job's command-line overrides ([] outside a Hydra app)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return list(HydraConfig.get().overrides.task)
    except ValueError:
        return []


def compose_variant(overrides: Sequence[str]) -> Config:
    """The validated config of ``conf/config.yaml`` with ``overrides`` (``ConfigError`` naming the bad one)."""
    try:
        raw = compose_config(overrides)
    except ConfigError as exc:
        raise ConfigError(f"study variant {exc}") from exc
    return validate(raw)


def describe_variant(cfg: Config) -> dict[str, Any]:
    """Columns that identify a composed deployment in a study table."""
    system, engine = cfg.system, cfg.engine
    sim = engine if isinstance(engine, SimEngineConfig) else None
    scheduling = engine if isinstance(engine, SimEngineConfig | VllmEngineConfig) else None  # rejection, batch limit
    return {"system": system.name, "router": system.router, "colocated": system.colocated_instances,
            "prefill": system.prefill_instances, "decode": system.decode_instances, "mixed": system.mixed_instances,
            "model": cfg.model.name, "hardware": cfg.hardware.name, "engine": engine.name,
            "perf_model": sim.perf_model if sim else None,
            "rejection": scheduling.rejection if scheduling else None,
            "decode_load_threshold": scheduling.decode_load_threshold if scheduling else None,
            "arrival_time_scale": cfg.workload.arrival.time_scale,  # a trace replayed 1 / this times faster
            "max_num_seqs": scheduling.max_num_seqs if scheduling else None}
