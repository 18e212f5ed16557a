"""What a job returns to the composition root, independent of its kind, and the lazy reference to a job's
runner that lets the composition root name every kind of job without importing them all."""

from __future__ import annotations

import importlib
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


@dataclass(frozen=True)
class LazyRunner:
    """A job runner named by module and function, imported on its first call: a simulator run then never
    imports the modules of the real-engine, calibration or study jobs (and what they import)."""

    module: str
    name: str

    def resolve(self) -> Any:
        """The runner function itself (imports its module)."""
        return getattr(importlib.import_module(self.module), self.name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)
