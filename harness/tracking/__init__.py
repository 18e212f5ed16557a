"""Publishing finished jobs to experiment trackers. ``logger=none`` (the default) publishes nothing;
``logger=wandb`` goes through the one W&B adapter, which is the only module that imports wandb."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.config import LoggerConfig
from harness.results import RunFolder
from vocab.records import RunSummary

if TYPE_CHECKING:
    import pandas as pd


def publish(logger_cfg: LoggerConfig, summary: RunSummary, config: Mapping[str, Any], folder: RunFolder,
            tables: Mapping[str, pd.DataFrame], figures: Sequence[Path]) -> None:
    """Send a finished job to the tracker named by ``logger_cfg.name``."""
    if logger_cfg.name == "none":
        return
    if logger_cfg.name == "wandb":
        from harness.tracking.wandb_logger import publish_to_wandb

        publish_to_wandb(logger_cfg, summary, config, folder, tables, figures)
        return
    raise ValueError(f"logger.name: unknown tracker {logger_cfg.name!r}")
