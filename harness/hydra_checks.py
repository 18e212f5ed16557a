"""Hydra callbacks (``hydra.callbacks`` in ``conf/config.yaml``): checks before Hydra creates a job's output
folder, and redaction of the config copies Hydra saves in it.

Hydra makes ``hydra.run.dir`` (``<results_dir>/<experiment_name>/<time>``) before the job starts, so a
``results_dir`` that cannot hold folders would otherwise end in Hydra's traceback. :class:`ResultsDirCheck`
refuses it first with one line naming ``results_dir`` and exit status 2. No ``summary.json`` can be
written then: the folder it would go in is the one that cannot exist. It also refuses a run folder that
already holds a run's results unless ``overwrite=true`` (then it removes them first;
:mod:`harness.folder_guard`), before Hydra appends to the old log or replaces the old ``.hydra/``.

:class:`RedactHydraFiles` rewrites the ``.hydra/*.yaml`` copies of the config (and a sweep's
``multirun.yaml``) with secrets redacted (:mod:`harness.redaction`) as soon as Hydra has saved them,
before the job starts. (Log records are redacted as they are created: ``harness/__main__.py``.)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from harness.folder_guard import FolderInUse, guard_folder
from harness.redaction import redact_text, redact_yaml
from harness.results import atomic_write_text


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
    """Refuse a run or sweep whose output folder cannot be created, and a run folder that holds results
    without ``overwrite=true`` (exit status 2)."""

    def _check(self, config: DictConfig, key: str) -> None:
        folder = Path(str(config.hydra[key].dir))
        problem = results_dir_problem(folder.absolute())
        if problem:
            print(redact_text(f"error: results_dir={config.get('results_dir')}: cannot create the job folder {folder}: "
                              f"{problem}"), file=sys.stderr)
            sys.exit(2)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(config, "run")
        folder = Path(str(config.hydra.run.dir))
        try:
            guard_folder(folder, overwrite=bool(config.get("overwrite", False)), include_run_files=True)
        except FolderInUse as exc:
            print(redact_text(f"error: {exc}"), file=sys.stderr)
            sys.exit(2)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(config, "sweep")


class RedactHydraFiles(Callback):
    """Redact secrets in the config copies Hydra saved for this job (``.hydra/``, ``multirun.yaml``)."""

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        hydra = config.hydra
        files: list[Path] = []
        if hydra.output_subdir is not None:
            files += sorted((Path(str(hydra.runtime.output_dir)) / str(hydra.output_subdir)).glob("*.yaml"))
        if hydra.mode == RunMode.MULTIRUN:
            files.append(Path(str(hydra.sweep.dir)) / "multirun.yaml")
        for path in files:
            if path.is_file():
                redacted = redact_yaml(path.read_text(encoding="utf-8"))
                if redacted is not None:
                    atomic_write_text(path, redacted)
