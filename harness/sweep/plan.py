"""The jobs a sweep command expands to, where each one's folder is, and the dry run that lists them.

A sweep's overrides (``system=a,b engine.rate_rps=1,2`` plus ``hydra.sweeper.params``) are expanded with
Hydra's own parser and its basic sweeper's cartesian product, so the jobs here are the jobs Hydra runs,
in the same order. A job's folder is ``hydra.sweep.dir`` / ``hydra.sweep.subdir`` of its config: with the
default subdir (:mod:`harness.sweep.naming`) and no job overriding ``results_dir`` or ``experiment_name``
it is computed from the overrides alone; otherwise each job's config is composed.

The dry run (``python -m harness --multirun ... dry_run=true``) composes each job, hashes its config
(:mod:`harness.sweep.config_hash`) and prints one line per job: what the sweep would do with it
(:mod:`harness.sweep.resume`). It writes nothing and starts nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig, OmegaConf, open_dict

from harness.sweep.config_hash import config_hash
from harness.sweep.naming import RESOLVER, job_dirname
from harness.sweep.resume import JobState, folder_state

SUBDIR_TEMPLATE = f"${{{RESOLVER}:${{hydra.job.override_dirname}}}}"
FOLDER_KEYS = frozenset({"results_dir", "experiment_name"})  # keys hydra.sweep.dir is made of


@dataclass(frozen=True)
class PlannedJob:
    """One job of a sweep: its number, its own overrides and its folder."""

    num: int
    overrides: tuple[str, ...]
    folder: Path


def sweep_arguments(master: DictConfig) -> list[str]:
    """The sweep's overrides as Hydra's basic sweeper reads them: ``hydra.sweeper.params``, then the command line."""
    params = OmegaConf.select(master, "hydra.sweeper.params", default=None) or {}
    task = OmegaConf.to_container(master.hydra.overrides.task, resolve=False)
    assert isinstance(task, list)
    return [f"{k}={v}" for k, v in dict(params).items()] + [str(a) for a in task]


def expand(arguments: Sequence[str]) -> list[list[str]]:
    """Every job's overrides, in the order Hydra's basic sweeper launches them."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(arguments))
    return [list(job) for job in BasicSweeper.split_arguments(parsed, None)[0]]


def _dirname(master: DictConfig, job: Sequence[str]) -> str:
    from hydra._internal.config_loader_impl import get_overrides_dirname
    from hydra.core.override_parser.overrides_parser import OverridesParser

    settings = master.hydra.job.config.override_dirname
    parsed = OverridesParser.create().parse_overrides(list(job))
    return get_overrides_dirname(overrides=parsed, exclude_keys=list(settings.exclude_keys),
                                 item_sep=str(settings.item_sep), kv_sep=str(settings.kv_sep))


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _needs_composition(master: DictConfig, jobs: Sequence[Sequence[str]]) -> bool:
    """Whether the jobs' folders differ in more than their overrides' names (another subdir, a swept
    ``results_dir`` or ``experiment_name``)."""
    subdir = master.hydra.sweep._get_node("subdir")._value()  # unresolved
    values: dict[str, set[str]] = {}
    for job in jobs:
        for override in job:
            values.setdefault(_key(override), set()).add(override)
    return str(subdir) != SUBDIR_TEMPLATE or any(len(values.get(key, ())) > 1 for key in FOLDER_KEYS)


def compose_job(master: DictConfig, job: Sequence[str], num: int) -> DictConfig:
    """One job's config with its ``hydra`` node, composed as the sweep would (the master's ``hydra``
    overrides, then the job's; ``hydra.job.num`` set)."""
    from hydra import compose

    hydra_overrides = [str(o) for o in OmegaConf.to_container(master.hydra.overrides.hydra, resolve=False) or []]
    cfg = compose(config_name="config", overrides=[*hydra_overrides, *job], return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.job.num = num
    return cfg


def folder_of(cfg: DictConfig) -> Path:
    """``hydra.sweep.dir`` / ``hydra.sweep.subdir`` of a composed job config."""
    return Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir)


def plan_jobs(master: DictConfig) -> list[PlannedJob]:
    """The sweep's jobs with their folders (needs an initialised Hydra when jobs must be composed)."""
    jobs = expand(sweep_arguments(master))
    if _needs_composition(master, jobs):
        return [PlannedJob(i, tuple(job), folder_of(compose_job(master, job, i))) for i, job in enumerate(jobs)]
    sweep_dir = Path(str(master.hydra.sweep.dir))
    return [PlannedJob(i, tuple(job), sweep_dir / job_dirname(_dirname(master, job))) for i, job in enumerate(jobs)]


@dataclass(frozen=True)
class DryRunLine:
    """What a sweep run now would do with one job."""

    job: PlannedJob
    state: JobState
    action: str
    config_hash: str


ACTIONS: Mapping[JobState, str] = {
    JobState.MISSING: "run",
    JobState.DONE: "skip (ok for the same config)",
    JobState.FAILED: "run again (failed before)",
    JobState.KILLED: "run again (was killed: summary still 'running')",
    JobState.CONFLICT: "refuse (holds ok results of another config; overwrite=true replaces them)",
}


def dry_run(master: DictConfig, overwrite: bool) -> list[DryRunLine]:
    """What running the sweep now would do with each job (composes every job; writes nothing)."""
    lines = []
    for i, job in enumerate(expand(sweep_arguments(master))):
        cfg = compose_job(master, job, i)
        folder = folder_of(cfg)
        with open_dict(cfg):
            del cfg["hydra"]  # the job's own config, as the job hashes it
        digest = config_hash(OmegaConf.to_container(cfg, resolve=True))
        state = folder_state(folder, digest).state
        action = "run (overwrite=true)" if overwrite and state is not JobState.MISSING else ACTIONS[state]
        lines.append(DryRunLine(PlannedJob(i, tuple(job), folder), state, action, digest))
    return lines


def format_dry_run(lines: Sequence[DryRunLine], cwd: Optional[Path] = None) -> str:
    """The dry run as text: one line per job, then a count of each action."""
    cwd = cwd or Path.cwd()
    rows = []
    for line in lines:
        try:
            where = line.job.folder.resolve().relative_to(cwd.resolve())
        except ValueError:
            where = line.job.folder
        rows.append(f"#{line.job.num:<4} {line.action:<34} {where}")
    counts: dict[str, int] = {}
    for line in lines:
        verb = line.action.split(" (")[0]
        counts[verb] = counts.get(verb, 0) + 1
    tally = ", ".join(f"{n} {verb}" for verb, n in counts.items())
    return "\n".join([f"dry run: {len(lines)} job(s): {tally}; nothing was run or written", *rows])


