"""What a job returns to the composition root, independent of its kind."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas is imported by whoever builds a table; naming the type costs nothing
    import pandas as pd


@dataclass(frozen=True)
class JobResult:
    """Outcome of one job: summary blocks plus what trackers may publish."""

    metrics: dict[str, Any]
    validity: dict[str, Any] = field(default_factory=dict)
    workload: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # logical name -> path relative to the job folder
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)  # tables trackers may publish (W&B)
    figures: tuple[Path, ...] = ()
