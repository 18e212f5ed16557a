"""The sweep's Hydra callback (``hydra.callbacks.sweep_report`` in ``conf/config.yaml``).

- Before the sweep: names each job's folder by the keys the sweep varies (the keys given one value are
  added to ``hydra.job.config.override_dirname.exclude_keys``, so ``system=a,b seed=1`` gives folders
  ``system=a`` and ``system=b``), makes a relative ``results_dir`` absolute for every job (a launcher's
  worker may run in another directory), and with ``dry_run=true`` prints what the sweep would do with each job
  (:func:`harness.sweep.plan.dry_run`) and exits 0 before anything is launched or written.
- After the sweep (whatever launcher ran it): writes ``sweep.csv`` (:mod:`harness.sweep.table`) and the
  figures across jobs (:mod:`figures.sweep`) into the sweep dir, logs one line per failed job, and exits
  with the number of jobs that did not end ``ok`` (capped at :data:`MAX_EXIT_STATUS`); 0 when all did.
  Jobs go on after one fails (the job function records the failure in its ``summary.json`` and returns).
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Optional

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from harness.redaction import redact_text
from harness.sweep.plan import dry_run, format_dry_run, plan_jobs, sweep_arguments
from harness.sweep.table import SWEEP_TABLE, count_failures, sweep_table

log = logging.getLogger(__name__)

MAX_EXIT_STATUS = 100  # above this a sweep's exit status would read as a signal (128 + n) or wrap at 256
EXCLUDE_KEY = "hydra.job.config.override_dirname.exclude_keys"


def _parsed_overrides(master: DictConfig) -> list[Any]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_overrides(sweep_arguments(master))


def constant_keys(master: DictConfig) -> list[str]:
    """Keys the sweep's overrides give a single value (the same in every job)."""
    parsed = _parsed_overrides(master)
    return sorted({o.key_or_group for o in parsed} - set(swept_keys(master)))


def name_folders_by_swept_keys(master: DictConfig) -> None:
    """Keep the sweep's constant keys out of each job's folder name (here and in every job's config)."""
    current = [str(k) for k in OmegaConf.select(master, EXCLUDE_KEY, default=[]) or []]
    extra = [k for k in constant_keys(master) if k not in current]
    if not extra:
        return
    keys = current + extra
    with read_write(master.hydra), open_dict(master.hydra):
        OmegaConf.update(master, EXCLUDE_KEY, keys, merge=False)
        master.hydra.overrides.hydra.append(f"{EXCLUDE_KEY}=[{','.join(keys)}]")


def anchor_results_dir(master: DictConfig) -> None:
    """Give every job the absolute ``results_dir``: a launcher may run a job in another working directory
    (a Ray worker runs in its raylet's), where a relative one would put the job's folder elsewhere."""
    results_dir = Path(str(master.get("results_dir", "results")))
    if results_dir.is_absolute() or "results_dir" in swept_keys(master):
        return
    absolute = str(results_dir.absolute())
    with read_write(master), open_dict(master):
        master.results_dir = absolute
        master.hydra.overrides.task.append(f"results_dir={absolute}")


class SweepReport(Callback):
    """Folder names and the dry run before a sweep; ``sweep.csv``, figures and the exit status after it."""

    def __init__(self) -> None:
        self.started: Optional[datetime] = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.started = datetime.now(UTC)
        name_folders_by_swept_keys(config)
        anchor_results_dir(config)
        if bool(config.get("dry_run", False)):
            lines = dry_run(config, overwrite=bool(config.get("overwrite", False)))
            print(redact_text(format_dry_run(lines)))
            sys.exit(0)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if bool(config.get("dry_run", False)):
            print(redact_text(f"dry run: 1 job: run into {config.hydra.run.dir} (a single run always runs in a new "
                              "folder; resume applies to --multirun sweeps); nothing was run or written"))
            sys.exit(0)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        jobs = plan_jobs(config)
        sweep_dir = Path(str(config.hydra.sweep.dir))
        table = sweep_table(jobs, sweep_dir, since=self.started)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        table.to_csv(sweep_dir / SWEEP_TABLE, index=False)
        figure_paths = draw_figures(table, sweep_dir, swept_keys(config))
        failures = count_failures(table)
        published = publish_sweep(config, sweep_dir, table, figure_paths)
        per_job = table.drop_duplicates("folder")
        resumed = int(per_job["resumed"].sum()) if "resumed" in per_job else 0
        log.info("sweep: %d job(s): %d ok (%d kept from an earlier run), %d failed; table: %s%s", len(per_job),
                 len(per_job) - failures, resumed, failures, sweep_dir / SWEEP_TABLE,
                 f"; {len(figure_paths) // 2} figure(s) in {figure_paths[0].parent}" if figure_paths else "")
        for _, row in per_job[per_job["status"] != "ok"].iterrows():
            print(redact_text(f"error: sweep job {row['folder']} {row['status']}: {row['reason']}"), file=sys.stderr)
        if failures:
            print(f"error: {failures} of {len(per_job)} sweep job(s) did not finish ok (exit status "
                  f"{min(failures, MAX_EXIT_STATUS)}); run the same command again to rerun only those", file=sys.stderr)
            sys.exit(min(failures, MAX_EXIT_STATUS))
        if not published:
            sys.exit(1)


def publish_sweep(config: DictConfig, sweep_dir: Path, table: Any, figures: list[Path]) -> bool:
    """With ``logger=wandb``, the sweep table and figures as one more run of the jobs' W&B group; False (and
    one error line) when that fails: the sweep's results are complete on disk but were not published."""
    if str(OmegaConf.select(config, "logger.name", default="none")) != "wandb":
        return True
    from harness.config import LoggerConfig
    from harness.tracking.wandb_logger import publish_sweep_to_wandb

    logger_cfg = LoggerConfig(**OmegaConf.to_container(config.logger, resolve=True))  # type: ignore[arg-type]
    try:
        publish_sweep_to_wandb(logger_cfg, str(config.experiment_name), sweep_dir, table, figures)
    except Exception as exc:  # noqa: BLE001 - reported as one line; the jobs and the table are on disk
        print(redact_text(f"error: publishing the sweep table to wandb failed: {type(exc).__name__}: {exc}"),
              file=sys.stderr)
        return False
    return True


def swept_keys(master: DictConfig) -> list[str]:
    """The keys the sweep varies, in command-line order."""
    return [o.key_or_group for o in _parsed_overrides(master) if o.is_sweep_override()]


def draw_figures(table: Any, sweep_dir: Path, keys: list[str]) -> list[Path]:
    """The default figures across jobs (none when nothing numeric varies); a figure that cannot be drawn is
    logged, not fatal: the table is the sweep's result."""
    from figures.sweep import default_sweep_figures

    try:
        return default_sweep_figures(table, sweep_dir, keys)
    except Exception as exc:  # noqa: BLE001 - a figure never fails a finished sweep
        log.warning("sweep figures not drawn: %s: %s", type(exc).__name__, exc)
        return []

