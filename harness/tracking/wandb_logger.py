"""The Weights & Biases adapter: config, flattened summary metrics, tables, figures and the run
folder as an artifact. Runs offline when no API key is configured and says how to sync.

The config, the summary and the artifact's metadata are uploaded with secrets redacted
(:mod:`harness.redaction`); the folder's files already are. W&B also records the command line
(``sys.argv``) in its run metadata: when that holds a secret (``engine.url=http://user:PASSWORD@...``),
W&B's metadata collection is turned off for the run (``x_disable_meta``)."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from harness.config import LoggerConfig
from harness.redaction import redact
from harness.results import RunFolder
from vocab.records import RunSummary

log = logging.getLogger(__name__)

MAX_TABLE_ROWS = 200_000  # W&B tables beyond this are slow to upload and render; the artifact has all rows


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten nested dicts into ``a/b/c`` keys (W&B summary keys)."""
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        path = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            flat.update(flatten(value, path))
        else:
            flat[path] = value
    return flat


def has_api_key() -> bool:
    """True when W&B credentials are configured (env var or netrc entry)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        return "api.wandb.ai" in netrc.read_text(encoding="utf-8")
    except OSError:
        return False


def resolve_mode(requested: str | None) -> str:
    if requested is not None:
        return requested
    return "online" if has_api_key() else "offline"


def command_line_has_secret(argv: Sequence[str] | None = None) -> bool:
    """Whether the command line (default ``sys.argv``) holds something :func:`redact` would hide."""
    args = list(sys.argv if argv is None else argv)
    return redact(args) != args


def artifact_name(summary: RunSummary) -> str:
    """``run-<experiment>-<job>`` in the characters W&B allows (a sweep job's folder is ``key=value,...``)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", f"run-{summary.experiment}-{summary.job}")


def publish_to_wandb(logger_cfg: LoggerConfig, summary: RunSummary, config: Mapping[str, Any], folder: RunFolder,
                     tables: Mapping[str, pd.DataFrame], figures: Sequence[Path]) -> None:
    """Log one finished job as one W&B run."""
    try:
        import wandb
    except ImportError as exc:
        raise RuntimeError("logger=wandb needs the wandb extra: pip install -e '.[wandb]'") from exc

    summary = RunSummary(**redact(dataclasses.asdict(summary)))
    config = redact(dict(config))
    mode = resolve_mode(logger_cfg.mode)
    hide_meta = command_line_has_secret()
    if hide_meta:
        log.info("W&B: the command line holds a secret, so W&B's run metadata (command line, host) is not collected")
    run = wandb.init(
        project=logger_cfg.project, entity=logger_cfg.entity, mode=mode, dir=str(folder.path),
        name=f"{summary.experiment}/{summary.job}", group=logger_cfg.group or summary.experiment, job_type=summary.kind,
        tags=list(logger_cfg.tags), config=config, reinit="finish_previous",
        settings=wandb.Settings(x_disable_meta=hide_meta),
    )
    try:
        scalars = {k: v for k, v in flatten({"metrics": summary.metrics, "validity": summary.validity}).items()
                   if isinstance(v, int | float | bool | str) or v is None}
        run.summary.update({**scalars, "status": summary.status, "git_sha": summary.git_sha})
        for name, frame in tables.items():
            if len(frame) > MAX_TABLE_ROWS:
                log.warning("W&B table %s truncated to %d of %d rows (the artifact holds all)", name,
                            MAX_TABLE_ROWS, len(frame))
                frame = frame.head(MAX_TABLE_ROWS)
            run.log({f"table/{name}": wandb.Table(dataframe=frame.reset_index(drop=True))})
        for path in figures:
            if path.suffix == ".png":
                run.log({f"figure/{path.stem}": wandb.Image(str(path))})
        artifact = wandb.Artifact(name=artifact_name(summary), type="run-folder",
                                  metadata=dataclasses.asdict(summary) | {"metrics": scalars})
        for child in folder.path.iterdir():
            if child.name == "wandb":
                continue
            if child.is_dir():
                artifact.add_dir(str(child), name=child.name)
            else:
                artifact.add_file(str(child), name=child.name)
        run.log_artifact(artifact)
        local_dir = run.dir
    finally:
        run.finish()
    if mode == "offline":
        offline_dir = Path(local_dir).parent
        log.info("W&B ran offline (no API key). Upload later with: wandb sync %s", offline_dir)


def publish_sweep_to_wandb(logger_cfg: LoggerConfig, experiment: str, sweep_dir: Path, table: pd.DataFrame,
                           figures: Sequence[Path]) -> None:
    """Log a finished sweep as one more run of its jobs' group (``job_type=sweep``): the sweep table and the
    figures across jobs, so the group's page holds the comparison beside the jobs."""
    try:
        import wandb
    except ImportError as exc:
        raise RuntimeError("logger=wandb needs the wandb extra: pip install -e '.[wandb]'") from exc

    mode = resolve_mode(logger_cfg.mode)
    table = pd.DataFrame(redact(table.to_dict(orient="list")))
    run = wandb.init(
        project=logger_cfg.project, entity=logger_cfg.entity, mode=mode, dir=str(sweep_dir),
        name=f"{experiment}/sweep", group=logger_cfg.group or experiment, job_type="sweep",
        tags=list(logger_cfg.tags), config={"jobs": int(table["folder"].nunique()) if "folder" in table else 0},
        reinit="finish_previous", settings=wandb.Settings(x_disable_meta=command_line_has_secret()),
    )
    try:
        shown = table.head(MAX_TABLE_ROWS).astype(str)  # mixed column types: W&B tables want one type a column
        run.log({"table/sweep": wandb.Table(dataframe=shown.reset_index(drop=True))})
        for path in figures:
            if path.suffix == ".png":
                run.log({f"figure/{path.stem}": wandb.Image(str(path))})
        local_dir = run.dir
    finally:
        run.finish()
    if mode == "offline":
        log.info("W&B ran offline (no API key). Upload later with: wandb sync %s", Path(local_dir).parent)
