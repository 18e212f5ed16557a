"""The hardware catalog: ``conf/hardware/<name>.yaml`` (the Hydra group) read into ``HardwareConfig``,
and what a number of devices of one type cost per hour and draw in power.

The simulator needs hardware by name (an ``InstanceShape`` names its GPU type, and a Splitwise
deployment mixes two types), real deployments price each role by its hardware, and the Splitwise
provisioning study prices machines; all read the same YAML files Hydra composes, validated by the same
schema. Unknown names raise ``ValueError`` listing the known ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from systems.config import CONF_DIR, HardwareConfig


def _hardware_dir(conf_dir: Optional[Path]) -> Path:
    return Path(conf_dir or CONF_DIR) / "hardware"


def known_hardware(conf_dir: Optional[Path] = None) -> tuple[str, ...]:
    """Names of the hardware YAMLs in ``<conf_dir>/hardware`` (sorted)."""
    return tuple(sorted(p.stem for p in _hardware_dir(conf_dir).glob("*.yaml")))


def load_hardware(name: str, conf_dir: Optional[Path] = None) -> HardwareConfig:
    """The validated ``HardwareConfig`` of ``conf/hardware/<name>.yaml``.

    Raises ``ValueError`` for an unknown name (listing the known ones) or an invalid file (naming the key).
    """
    path = _hardware_dir(conf_dir) / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(known_hardware(conf_dir)) or "(none)"
        raise ValueError(f"unknown hardware {name!r}: known hardware is {known} (files in {path.parent})")
    try:
        node = OmegaConf.merge(OmegaConf.structured(HardwareConfig), OmegaConf.load(path))
        hw = OmegaConf.to_object(node)
    except OmegaConfBaseException as exc:
        cause = exc.__cause__ if isinstance(exc.__cause__, ValueError) else None
        detail = str(cause) if cause else f"hardware.{getattr(exc, 'full_key', '') or '?'}: {getattr(exc, 'msg', exc)}"
        raise ValueError(f"{path}: {detail}") from exc
    except ValueError as exc:  # the schema's __post_init__ checks (they name the key)
        raise ValueError(f"{path}: {exc}") from exc
    assert isinstance(hw, HardwareConfig)
    if hw.name != name:
        raise ValueError(f"{path}: hardware.name: expected {name!r} (the file name), got {hw.name!r}")
    return hw


@dataclass(frozen=True)
class DeviceCost:
    """Price and power of some devices of one hardware type; None when its YAML gives no figure."""

    usd_per_hour: Optional[float]
    watts: Optional[float]


def device_cost(name: str, devices: int = 1, conf_dir: Optional[Path] = None) -> DeviceCost:
    """``devices`` x the price per hour and the power of ``conf/hardware/<name>.yaml``."""
    hw = load_hardware(name, conf_dir)
    price = None if hw.price_per_hour_usd is None else devices * float(hw.price_per_hour_usd)
    watts = None if hw.power_w is None else devices * float(hw.power_w)
    return DeviceCost(price, watts)
