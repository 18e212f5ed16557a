"""``python -m harness``: the Hydra entry point (composition root of every run).

A :class:`~vocab.errors.UserError` (bad config, missing or malformed file, a deployment that cannot
start, a job folder that already holds results without ``overwrite=true``) is printed as one line
naming the file, line or key, with exit status 2 and no traceback; the job folder keeps its
``summary.json`` with ``status: failed`` and the reason (a refused folder is left untouched). SIGTERM or
SIGHUP during a job leaves ``status: failed`` with ``terminated by SIGTERM`` and exits with 128 + the
signal number (143 for SIGTERM), as a shell reports a process the signal ended. Anything else is a bug
and keeps its traceback. Hydra's own errors about the command line or the config tree (an unknown key, a
value of the wrong type, a missing group option) get the same one line and exit status 2: Hydra is told to
raise them (``HYDRA_FULL_ERROR``) instead of printing several lines and exiting 1. Messages and every log record (console, ``harness.log``, Hydra's own) are
redacted of secrets (:mod:`harness.redaction`), installed here before Hydra sets up logging.

In a ``--multirun`` sweep a failed job does not stop the sweep: its error line names the job, its
``summary.json`` says why, and the sweep goes on; at the end :class:`harness.sweep.report.SweepReport`
writes ``sweep.csv`` and exits with the number of jobs that did not end ``ok`` (0 when all did). SIGTERM
still ends the whole sweep (143); the jobs not run are left for the same command to resume.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from types import TracebackType
from typing import Optional

import hydra
from hydra.errors import HydraException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from harness.app import JobContext, context_from_hydra, run_job, signal_name
from harness.config import register_configs, renamed_key_message
from harness.redaction import install_log_redaction, redact_text
from systems.launch.processes import Terminated
from vocab.errors import UserError

log = logging.getLogger("harness")


def exit_status(exc: Terminated) -> int:
    """128 + the number of the signal that ended the job (143 for SIGTERM, 129 for SIGHUP)."""
    try:
        return 128 + int(signal.Signals[signal_name(exc)])
    except KeyError:
        return 128 + int(signal.SIGTERM)


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    install_log_redaction()  # again here: a launcher may run the job in another process (joblib, Slurm, Ray)
    _launch_directory()
    ctx = context_from_hydra(cfg)
    if cfg.get("dry_run", False):  # the sweep's callback lists the jobs and exits before any is launched
        print(f"error: {_job_prefix(ctx)}dry_run=true reached a job; it was not run", file=sys.stderr)
        sys.exit(2)
    try:
        run_job(cfg, ctx)
    except UserError as exc:
        print(redact_text(f"error: {_job_prefix(ctx)}{exc}"), file=sys.stderr)
        if not ctx.multirun:
            sys.exit(2)
    except Terminated as exc:  # ends a sweep too: the jobs not yet run are left for the next run to resume
        print(f"error: {_job_prefix(ctx)}terminated by {signal_name(exc)}", file=sys.stderr)
        sys.exit(exit_status(exc))
    except Exception:
        if not ctx.multirun:
            raise
        # continue on error: the job's summary.json says failed and why; the sweep's exit status counts it
        log.exception("sweep job %s failed (summary: %s)", ctx.job, ctx.folder.path / "summary.json")


def _launch_directory() -> None:
    """Run the job in the directory the command was launched from, as relative paths in the config
    (``data_dir``, ``engine.profile``, the trace search path) mean: a Ray worker starts in its raylet's."""
    from hydra.core.hydra_config import HydraConfig

    launched = str(HydraConfig.get().runtime.cwd or "")
    if launched and os.path.isdir(launched) and os.path.realpath(launched) != os.path.realpath(os.getcwd()):
        log.info("running in %s, the directory the sweep was launched from (the worker started in %s)",
                 launched, os.getcwd())
        os.chdir(launched)


def _job_prefix(ctx: JobContext) -> str:
    return f"sweep job {ctx.job}: " if ctx.multirun else ""


def _raised_in_job(tb: Optional[TracebackType]) -> bool:
    """Whether the traceback passes through :func:`harness.app.run_job` (then it is not a composition error)."""
    while tb is not None:
        if tb.tb_frame.f_code is run_job.__code__:
            return True
        tb = tb.tb_next
    return False


def composition_error(exc: BaseException) -> Optional[str]:
    """One line for an error Hydra or OmegaConf raised while composing the config (None: not one)."""
    if not isinstance(exc, HydraException | OmegaConfBaseException) or _raised_in_job(exc.__traceback__):
        return None
    renamed = renamed_key_message(f"{exc} {exc.__cause__ or ''}")
    if renamed is not None:
        return renamed
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    first = lines[0] if lines else type(exc).__name__
    cause = exc.__cause__
    if cause is not None and str(cause).strip():
        first = f"{first.rstrip('.')}; {str(cause).strip().splitlines()[0]}"
    return first


if __name__ == "__main__":
    install_log_redaction()
    register_configs()
    os.environ["HYDRA_FULL_ERROR"] = "1"  # composition errors reach us; composition_error makes them one line
    try:
        main()
    except Exception as exc:
        message = composition_error(exc)
        if message is None:
            raise
        print(redact_text(f"error: {message}"), file=sys.stderr)
        sys.exit(2)
