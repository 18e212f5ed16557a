"""Which class builds which workload kind, and :func:`build_workload`, the one way to build a workload."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from workloads.azure_trace import AzureTraceWorkload
from workloads.base import Workload
from workloads.config import WorkloadConfig
from workloads.distserve_runs import DistServeRequestsWorkload
from workloads.errors import WorkloadConfigError
from workloads.mooncake_trace import MooncakeTraceWorkload
from workloads.shared_prefix import SharedPrefixWorkload
from workloads.sharegpt_lengths import ShareGPTLengthsWorkload

WORKLOAD_CLASSES: Mapping[str, type[Workload]] = MappingProxyType(
    {cls.kind: cls for cls in (MooncakeTraceWorkload, AzureTraceWorkload, SharedPrefixWorkload,
                               ShareGPTLengthsWorkload, DistServeRequestsWorkload)}
)


def known_kinds() -> list[str]:
    """The workload kinds that can be built."""
    return sorted(WORKLOAD_CLASSES)


def workload_class(kind: str) -> type[Workload]:
    """The class that builds ``kind``; :class:`WorkloadConfigError` listing the known kinds otherwise."""
    try:
        return WORKLOAD_CLASSES[kind]
    except (KeyError, TypeError):
        raise WorkloadConfigError(
            f"workload.kind: unknown workload kind {kind!r}; known kinds: {', '.join(known_kinds())}"
        ) from None


def to_workload_config(cfg: Any) -> WorkloadConfig:
    """A config dataclass from a dataclass, an OmegaConf ``DictConfig`` or a plain mapping.

    A ``DictConfig`` or mapping is merged onto the schema of its ``kind``, so types and unknown keys are
    checked and the ``__post_init__`` checks run.
    """
    if isinstance(cfg, WorkloadConfig):
        workload_class(cfg.kind)
        return cfg
    if not isinstance(cfg, DictConfig | Mapping):
        raise WorkloadConfigError(f"workload: expected a workload config, got {type(cfg).__name__}")
    cls = workload_class(cfg.get("kind"))
    try:
        merged = OmegaConf.merge(OmegaConf.structured(cls.config_cls), cfg)
        obj = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", "") or ""
        raise WorkloadConfigError(
            f"workload.{key}: {getattr(exc, 'msg', exc)}" if key else f"workload: {exc}"
        ) from exc
    assert isinstance(obj, WorkloadConfig)
    return obj


def build_workload(cfg: Any, data_dir: Optional[str] = None) -> Workload:
    """The workload of ``cfg`` (a config dataclass, a ``DictConfig`` or a mapping), its data under ``data_dir``."""
    config = to_workload_config(cfg)
    return workload_class(config.kind)(config, data_dir)
