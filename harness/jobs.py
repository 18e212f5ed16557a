"""What a job returns to the composition root, independent of its kind, and how a job times its parts."""

from __future__ import annotations

import time
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


class Laps:
    """Wall seconds between calls, for a job's ``<part>_wall_s`` metrics: each call returns the seconds since
    the previous one (the first: since this was made)."""

    def __init__(self) -> None:
        self.last = time.perf_counter()

    def __call__(self) -> float:
        now = time.perf_counter()
        seconds, self.last = now - self.last, now
        return seconds
