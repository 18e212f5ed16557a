"""Checks Hydra runs before it creates a job's output folder (``hydra.callbacks`` in ``conf/config.yaml``).

Hydra makes ``hydra.run.dir`` (``<results_dir>/<experiment_name>/<time>``) before the job starts, so a
``results_dir`` that cannot hold folders would otherwise end in Hydra's traceback. :class:`ResultsDirCheck`
refuses it first with one line naming ``results_dir`` and exit status 2. No ``summary.json`` can be
written then: the folder it would go in is the one that cannot exist.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


def results_dir_problem(path: Path) -> str | None:
    """Why ``path`` (a job or sweep folder) cannot be created or written, or None when it can."""
    for parent in [path, *path.parents]:
        if parent.exists():
            if not parent.is_dir():
                return f"{parent} is a file, not a folder"
            if not os.access(parent, os.W_OK | os.X_OK):
                return f"{parent} is not writable"
            return None
    return None


class ResultsDirCheck(Callback):
    """Refuse a run or sweep whose output folder cannot be created (exit status 2)."""

    def _check(self, config: DictConfig, key: str) -> None:
        folder = Path(str(config.hydra[key].dir))
        problem = results_dir_problem(folder.absolute())
        if problem:
            print(f"error: results_dir={config.get('results_dir')}: cannot create the job folder {folder}: {problem}",
                  file=sys.stderr)
            sys.exit(2)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(config, "run")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(config, "sweep")
