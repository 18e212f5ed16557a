"""Where a real engine runs and what it serves: the device (``engine.device=auto`` picks a GPU when one
is visible) and the local checkpoint (built here for synthetic models; weights are never downloaded)."""

from __future__ import annotations

import shutil
from pathlib import Path

from systems.config import ModelConfig
from systems.contract import DeploymentError
from systems.launch.tiny_model import build_tiny_llama


def resolve_device(requested: str) -> str:
    """``auto`` -> ``gpu`` when an NVIDIA device is visible, else ``cpu``."""
    if requested != "auto":
        return requested
    return "gpu" if Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi") else "cpu"


def resolve_model_path(model_cfg: ModelConfig) -> Path:
    """The checkpoint to serve: built locally for synthetic models, else the configured local path."""
    if model_cfg.synthetic:
        return build_tiny_llama(model_cfg)
    if not model_cfg.path:
        raise DeploymentError(f"model.path: model={model_cfg.name} needs a local checkpoint folder "
                              "(weights are never downloaded), e.g. model.path=/models/Meta-Llama-3-8B")
    path = Path(model_cfg.path).expanduser()
    if not (path / "config.json").is_file():
        raise DeploymentError(f"model.path={path}: no config.json there; expected a Hugging Face checkpoint folder")
    return path
