"""Runs one job in its results folder: validate the config, dispatch on ``job``, render figures,
write ``summary.json`` and publish to the configured tracker.

A folder that already holds a run's results is refused before anything is written, unless
``overwrite=true`` (then the old results are removed first; :mod:`harness.folder_guard`).
The folder gets a ``summary.json`` with ``status: running`` before any work and ``ok`` only after
every table and figure it names is written; any exception, Ctrl-C or SIGTERM/SIGHUP (turned into
``Terminated`` for the job's duration) rewrites it as ``failed`` with the reason (``terminated by
SIGTERM``), so a crashed or killed run never looks successful. A figure that cannot be drawn fails the
job the same way (``figures.render.FigureError``), after its tables are written; ``figures=false`` draws
none (``python -m figures`` draws them later from the tables). A tracker that cannot
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
from harness.config import Config, validate
from harness.folder_guard import FolderInUse, guard_folder
from harness.jobs import JobResult
from harness.redaction import redact
from harness.results import RunFolder
from harness.sweep.config_hash import config_hash
from harness.sweep.resume import RERUN_STATES, JobState, conflict_message, folder_state
from systems.launch.processes import ReceivedSignals, Terminated, sigterm_as_exception
from vocab.records import RunSummary
from vocab.result_files import CONFIG_FILE, REFUSED_FILE, SUMMARY_FILE

log = logging.getLogger(__name__)

JobRunner = Callable[[Config, RunFolder], JobResult]


# Each runner imports its job's module when the job runs: a simulator run imports no real-engine, calibration
# or study code (nor vLLM, aiohttp, W&B ... that those import).
def _serve(cfg: Config, folder: RunFolder) -> JobResult:
    from harness.serve_job import run_serve

    return run_serve(cfg, folder)


def _cache_study(cfg: Config, folder: RunFolder) -> JobResult:
    from harness.studies.cache_hit import run_cache_study

    return run_cache_study(cfg, folder)


def _workload(cfg: Config, folder: RunFolder) -> JobResult:
    from harness.workload_job import run_workload

    return run_workload(cfg, folder)


def _sim_study(cfg: Config, folder: RunFolder) -> JobResult:
    from harness.studies.dispatch import run_sim_study

    return run_sim_study(cfg, folder)


def _compare(cfg: Config, folder: RunFolder) -> JobResult:
    from harness.studies.real_compare import run_compare

    return run_compare(cfg, folder)


def _calibrate(cfg: Config, folder: RunFolder) -> JobResult:
    from harness.calibrate.job import run_calibrate

    return run_calibrate(cfg, folder)


def _sim_vs_real(cfg: Config, folder: RunFolder) -> JobResult:
    from harness.calibrate.sim_vs_real import run_sim_vs_real

    return run_sim_vs_real(cfg, folder)


# the function that runs each kind of job (``job=``)
JOB_RUNNERS: Mapping[str, JobRunner] = MappingProxyType({
    "serve": _serve, "cache_study": _cache_study, "workload": _workload, "sim_study": _sim_study,
    "compare": _compare, "calibrate": _calibrate, "sim_vs_real": _sim_vs_real,
})


@dataclass(frozen=True)
class JobContext:
    """Where a job writes and how Hydra composed it."""

    folder: RunFolder
    experiment: str
    job: str
    choices: dict[str, str]
    overrides: list[str]
    multirun: bool = False  # a job of a --multirun sweep: resumable (harness.sweep.resume)


def context_from_hydra(cfg: DictConfig) -> JobContext:
    """Build the job context from the running Hydra job (its output dir is the results folder)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_cfg = HydraConfig.get()
    out = Path(hydra_cfg.runtime.output_dir)
    choices = {k: str(v) for k, v in hydra_cfg.runtime.choices.items()
               if v is not None and not k.startswith("hydra")}
    return JobContext(folder=RunFolder(out), experiment=str(cfg.experiment_name), job=out.name,
                      choices=choices, overrides=list(hydra_cfg.overrides.task),
                      multirun=hydra_cfg.mode == RunMode.MULTIRUN)


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
    before anything is written when the folder holds results and ``overwrite`` is not set. A sweep's job
    (``ctx.multirun``) resumes instead (:mod:`harness.sweep.resume`): it returns the earlier summary when the
    folder holds ``ok`` results for the same config hash, and runs again over a failed or killed one."""
    digest = config_hash(OmegaConf.to_container(cfg, resolve=True))
    overwrite = bool(cfg.get("overwrite", False))
    if ctx.multirun:
        kept = _resume(ctx, digest, overwrite)
        if kept is not None:
            return kept
    guard_folder(ctx.folder.path, overwrite=overwrite, include_run_files=False)
    with sigterm_as_exception() as signals:
        return _run_job(cfg, ctx, digest, signals)


def _resume(ctx: JobContext, digest: str, overwrite: bool) -> RunSummary | None:
    """A sweep job's earlier results: the summary to keep (skip the job), or None to run it (after removing
    failed or killed results). ``FolderInUse`` for ok results of another config (unless ``overwrite``)."""
    folder = ctx.folder.path
    refused = folder / REFUSED_FILE
    state = folder_state(folder, digest)
    if state.skip:
        refused.unlink(missing_ok=True)
        log.info("skipped: %s already holds ok results for the same config (%s)", folder, digest)
        return _summary_from(state.summary or {})
    if state.state is JobState.CONFLICT and not overwrite:
        message = conflict_message(folder, state, digest)
        ctx.folder.write_text(REFUSED_FILE, message + "\n")
        raise FolderInUse(message)
    refused.unlink(missing_ok=True)
    if state.state in RERUN_STATES:
        log.info("running again: the earlier run in %s %s", folder,
                 "failed" if state.state is JobState.FAILED else "was killed (its summary still says running)")
    guard_folder(folder, overwrite=True, include_run_files=False)  # what a failed, killed or summary-less run left
    return None


def _summary_from(data: Mapping[str, Any]) -> RunSummary:
    known = {f.name for f in dataclasses.fields(RunSummary)}
    return RunSummary(**{k: v for k, v in data.items() if k in known})


def _fail(summary: RunSummary, ctx: JobContext, reason: str) -> RunSummary:
    summary = dataclasses.replace(summary, status="failed", reason=reason, finished_at=_now())
    ctx.folder.write_summary(summary)
    log.error("job failed: %s (summary: %s)", reason, ctx.folder.file(SUMMARY_FILE))
    return summary


def _render_figures(ctx: JobContext, typed: Config) -> list[Path]:
    """The job's figures, drawn from its tables; none with ``figures=false`` (matplotlib is then not imported)."""
    if not typed.figures:
        log.info("figures=false: no figures drawn (python -m figures --results-dir %s draws them)",
                 ctx.folder.path.parent)
        return []
    from figures.render import render_job

    return render_job(ctx.folder.path, typed.job)


def _publish(typed: Config, summary: RunSummary, resolved: dict[str, Any], ctx: JobContext, result: JobResult,
             figure_paths: list[Path]) -> None:
    """Hand the finished job to its tracker (which redacts). ``logger=none`` publishes nothing, so the
    tracking package (and the pandas its tables need) is imported only for a real tracker."""
    if typed.logger.name == "none":
        return
    from harness.tracking import publish

    publish(typed.logger, summary, resolved, ctx.folder, result.tables, figure_paths)


def _run_job(cfg: DictConfig, ctx: JobContext, digest: str, signals: ReceivedSignals) -> RunSummary:
    sha, dirty = provenance.git_state()
    resolved = write_config(cfg, ctx)
    summary = RunSummary(
        status="running", experiment=ctx.experiment, job=ctx.job, kind=str(resolved.get("job", "")),
        started_at=_now(), git_sha=sha, git_dirty=dirty, python=provenance.python_version(),
        package_versions=provenance.package_versions(), seeds=_seeds(resolved), choices=ctx.choices,
        overrides=ctx.overrides, files={"config": CONFIG_FILE}, config_hash=digest,
    )
    try:  # a signal that lands while the running summary is written (its fsync) still leaves a failed one
        ctx.folder.write_summary(summary)
        typed = validate(cfg)
        result = JOB_RUNNERS[typed.job](typed, ctx.folder)
        figure_paths = _render_figures(ctx, typed)
        signals.check()  # a SIGTERM whose exception Python dropped (raised inside a __del__) still fails the job
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
        _publish(typed, summary, resolved, ctx, result, figure_paths)
    except BaseException as exc:
        _fail(summary, ctx, f"publish to {typed.logger.name} failed: {failure_reason(exc)}; the results in this "
                            "folder are complete but were not published")
        raise
    return summary
