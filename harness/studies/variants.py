"""Composing the deployments a study compares: each variant is a list of Hydra overrides applied on
top of the job's own command line, exactly what ``python -m harness <overrides>`` would compose, so
any variant can be rerun on its own as a serving job.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.config import Config, ConfigError, register_configs, validate

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def job_overrides() -> list[str]:
    """The running Hydra job's command-line overrides ([] outside a Hydra app)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return list(HydraConfig.get().overrides.task)
    except ValueError:
        return []


def compose_variant(overrides: Sequence[str]) -> Config:
    """The validated config of ``conf/config.yaml`` with ``overrides`` (``ConfigError`` naming the bad one)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    register_configs()
    try:
        if GlobalHydra.instance().is_initialized():
            cfg = compose(config_name="config", overrides=list(overrides))
        else:
            with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
                cfg = compose(config_name="config", overrides=list(overrides))
    except HydraException as exc:
        raise ConfigError(f"study variant {list(overrides)}: {exc}") from exc
    return validate(cfg)


def describe_variant(cfg: Any) -> dict[str, Any]:
    """Columns that identify a composed deployment in a study table."""
    system = cfg.system
    return {"system": system.name, "router": system.router, "colocated": system.colocated_instances,
            "prefill": system.prefill_instances, "decode": system.decode_instances, "mixed": system.mixed_instances,
            "model": cfg.model.name, "hardware": cfg.hardware.name, "engine": cfg.engine.name,
            "perf_model": getattr(cfg.engine, "perf_model", None),
            "rejection": getattr(cfg.engine, "rejection", None), "max_num_seqs": getattr(cfg.engine, "max_num_seqs", None)}
