"""Runs one job in its results folder: validate the config, dispatch on ``job``, render figures,
write ``summary.json`` and publish to the configured tracker.

A folder that already holds a run's results is refused before anything is written, unless
``overwrite=true`` (then the old results are removed first; :mod:`harness.folder_guard`).
The folder gets a ``summary.json`` with ``status: running`` before any work and ``ok`` only after
every table and figure it names is written; any exception, Ctrl-C or SIGTERM/SIGHUP (turned into
``Terminated`` for the job's duration) rewrites it as ``failed`` with the reason (``terminated by
SIGTERM``), so a crashed or killed run never looks successful. A figure that cannot be drawn fails the
job the same way (``figures.render.FigureError``), after its tables are written. A tracker that cannot
publish the finished job (``logger=wandb``) fails it too: the summary keeps its metrics and files but
says ``failed`` with ``publish to wandb failed: ...`` as the reason, and the exit status is non-zero.
``config.yaml`` and ``summary.json`` are written, and the tracker is given the config and summary, with
secrets redacted (:mod:`harness.redaction`); the job itself uses the real values.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from omegaconf import DictConfig, OmegaConf

from harness import provenance
from harness.calibrate.job import run_calibrate
from harness.calibrate.sim_vs_real import run_sim_vs_real
from harness.config import Config, validate
from harness.folder_guard import guard_folder
from harness.jobs import JobResult
from harness.records import RunSummary
from harness.redaction import redact
from harness.result_files import CONFIG_FILE, SUMMARY_FILE
from harness.results import RunFolder
from harness.serve_job import run_serve
from harness.studies.cache_hit import run_cache_study
from harness.studies.dispatch import run_sim_study
from harness.studies.real_compare import run_compare
from harness.tracking import publish
from harness.workload_job import run_workload
from systems.launch.processes import Terminated, sigterm_as_exception

log = logging.getLogger(__name__)

JOB_RUNNERS: Mapping[str, Callable[[Config, RunFolder], JobResult]] = MappingProxyType({
    "serve": run_serve,
    "cache_study": run_cache_study,
    "workload": run_workload,
    "sim_study": run_sim_study,
    "compare": run_compare,
    "calibrate": run_calibrate,
    "sim_vs_real": run_sim_vs_real,
})


@dataclass(frozen=True)
class JobContext:
    """Where a job writes and how Hydra composed it."""

    folder: RunFolder
    experiment: str
    job: str
    choices: dict[str, str]
    overrides: list[str]


def context_from_hydra(cfg: DictConfig) -> JobContext:
    """Build the job context from the running Hydra job (its output dir is the results folder)."""
    from hydra.core.hydra_config import HydraConfig

    hydra_cfg = HydraConfig.get()
    out = Path(hydra_cfg.runtime.output_dir)
    choices = {k: str(v) for k, v in hydra_cfg.runtime.choices.items()
               if v is not None and not k.startswith("hydra")}
    return JobContext(folder=RunFolder(out), experiment=str(cfg.experiment_name), job=out.name,
                      choices=choices, overrides=list(hydra_cfg.overrides.task))


def figure_key(path: Path) -> str:
    """Name of a figure file in ``summary.files``: ``figure_<name>`` (PNG) or ``figure_<name>_data`` (CSV)."""
    return f"figure_{path.stem}" + ("_data" if path.suffix == ".csv" else "")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _seeds(container: Any, prefix: str = "") -> dict[str, int]:
    found: dict[str, int] = {}
    if isinstance(container, dict):
        for key, value in container.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if key == "seed" and isinstance(value, int):
                found[path] = value
            else:
                found.update(_seeds(value, path))
    return found


def write_config(cfg: DictConfig, ctx: JobContext) -> dict[str, Any]:
    """Write the resolved config plus the Hydra choices and overrides to ``config.yaml`` (secrets redacted);
    return the resolved config as is."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(resolved, dict)
    document = redact({**resolved, "_run": {"choices": ctx.choices, "overrides": ctx.overrides}})
    ctx.folder.write_text(CONFIG_FILE, "# Resolved configuration of this job; _run holds the Hydra "
                          "group choices and command-line overrides.\n" + OmegaConf.to_yaml(document))
    return resolved


def signal_name(exc: Terminated) -> str:
    """The signal a ``Terminated`` was raised for (``received SIGTERM`` -> ``SIGTERM``)."""
    return str(exc).rsplit(" ", 1)[-1] if str(exc) else "SIGTERM"


def failure_reason(exc: BaseException) -> str:
    """One line for ``summary.reason``: ``terminated by SIGTERM`` for a signal, else ``Type: message``."""
    if isinstance(exc, Terminated):
        return f"terminated by {signal_name(exc)}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def run_job(cfg: DictConfig, ctx: JobContext) -> RunSummary:
    """Validate, run, record and publish one job; re-raises after writing a failed summary. ``FolderInUse``
    before anything is written when the folder holds results and ``overwrite`` is not set."""
    guard_folder(ctx.folder.path, overwrite=bool(cfg.get("overwrite", False)), include_run_files=False)
    with sigterm_as_exception():
        return _run_job(cfg, ctx)


def _fail(summary: RunSummary, ctx: JobContext, reason: str) -> RunSummary:
    summary = dataclasses.replace(summary, status="failed", reason=reason, finished_at=_now())
    ctx.folder.write_summary(summary)
    log.error("job failed: %s (summary: %s)", reason, ctx.folder.file(SUMMARY_FILE))
    return summary


def _run_job(cfg: DictConfig, ctx: JobContext) -> RunSummary:
    sha, dirty = provenance.git_state()
    resolved = write_config(cfg, ctx)
    summary = RunSummary(
        status="running", experiment=ctx.experiment, job=ctx.job, kind=str(resolved.get("job", "")),
        started_at=_now(), git_sha=sha, git_dirty=dirty, python=provenance.python_version(),
        package_versions=provenance.package_versions(), seeds=_seeds(resolved), choices=ctx.choices,
        overrides=ctx.overrides, files={"config": CONFIG_FILE},
    )
    ctx.folder.write_summary(summary)
    try:
        typed = validate(cfg)
        result = JOB_RUNNERS[typed.job](typed, ctx.folder)
        from figures.render import render_job

        figure_paths = render_job(ctx.folder.path, typed.job)
        files = {**summary.files, **result.files,
                 **{figure_key(p): str(p.relative_to(ctx.folder.path)) for p in figure_paths}}
        summary = dataclasses.replace(summary, status="ok", finished_at=_now(), metrics=result.metrics,
                                      validity=result.validity, workload=result.workload, files=files)
        ctx.folder.write_summary(summary)
    except BaseException as exc:
        _fail(summary, ctx, failure_reason(exc))
        raise
    for name, path in summary.files.items():
        log.info("%s: %s", name, ctx.folder.file(path))
    try:
        publish(typed.logger, summary, resolved, ctx.folder, result.tables, figure_paths)  # the tracker redacts
    except BaseException as exc:
        _fail(summary, ctx, f"publish to {typed.logger.name} failed: {failure_reason(exc)}; the results in this "
                            "folder are complete but were not published")
        raise
    return summary
