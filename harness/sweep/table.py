"""``sweep.csv``: one table joining every job of a sweep, its overrides and its summary metrics.

One row per job, or per measured point for a job whose metrics hold a ``points`` list (``job=serve``
sweeping rates inside the job): ``folder`` (the job's folder, relative to the sweep dir), ``status`` (``ok``,
``failed``, ``missing``: no summary, e.g. a Slurm job that died; ``refused``: the folder holds the ok
results of another config), ``resumed`` (an ``ok`` job kept from an
earlier run of the sweep), ``reason``, ``config_hash``, one column per overridden key with the value the
job was given, then every scalar metric flattened to a dotted name (``ttft_ms.p50``; lists by index)
and ``valid`` (the summary's validity verdict, when it has one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from harness.redaction import redact
from harness.sweep.plan import PlannedJob
from harness.sweep.resume import read_summary
from vocab.result_files import REFUSED_FILE, SWEEP_TABLE_FILE

if TYPE_CHECKING:
    import pandas as pd

SWEEP_TABLE = SWEEP_TABLE_FILE
FIXED_COLUMNS = ("folder", "status", "resumed", "reason", "config_hash")
POINTS_KEY = "points"


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Scalars of a nested mapping/list under dotted names (``a.b.0.c``)."""
    out: dict[str, Any] = {}
    if isinstance(value, Mapping):
        for key, child in value.items():
            out.update(flatten(child, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(value, list | tuple):
        for i, child in enumerate(value):
            out.update(flatten(child, f"{prefix}.{i}" if prefix else str(i)))
    elif value is None or isinstance(value, bool | int | float | str):
        out[prefix] = value
    return out


def override_values(overrides: Sequence[str]) -> dict[str, str]:
    """``key=value`` overrides as a mapping (``+``/``~`` prefixes dropped), secrets redacted
    (:mod:`harness.redaction`: a URL's password, ``*_TOKEN``, ``*_KEY`` ...)."""
    values = {}
    for item in overrides:
        key, _, value = item.partition("=")
        values[key.lstrip("+~")] = value
    return redact(values)


def _started_before(summary: Mapping[str, Any], since: Optional[datetime]) -> bool:
    if since is None:
        return False
    try:
        started = datetime.fromisoformat(str(summary.get("started_at", "")))
    except ValueError:
        return False
    return started < since.replace(microsecond=0)


def _validity(summary: Mapping[str, Any]) -> Optional[bool]:
    validity = summary.get("validity")
    if isinstance(validity, Mapping) and isinstance(validity.get("valid"), bool):
        return bool(validity["valid"])
    return None


def job_rows(job: PlannedJob, sweep_dir: Path, since: Optional[datetime] = None) -> list[dict[str, Any]]:
    """The table rows of one job (``since``: when this sweep started; older ``ok`` summaries are ``resumed``)."""
    summary = read_summary(job.folder)
    base: dict[str, Any] = {"folder": _relative(job.folder, sweep_dir)}
    if summary is None:
        base.update(status="missing", resumed=False, reason="no summary.json (the job never started or was killed "
                    "before writing one)", config_hash="")
        return [{**base, **{k: v for k, v in override_values(job.overrides).items() if k not in FIXED_COLUMNS}}]
    status, reason = str(summary.get("status", "")), str(summary.get("reason", ""))
    refused = Path(job.folder) / REFUSED_FILE
    if refused.is_file():  # this run's job refused the folder: its ok results are another config's
        status, reason = "refused", redact(refused.read_text(encoding="utf-8").strip())
    base.update(status=status, resumed=status == "ok" and _started_before(summary, since), reason=reason,
                config_hash=str(summary.get("config_hash", "")))
    base.update({k: v for k, v in override_values(job.overrides).items() if k not in FIXED_COLUMNS})
    valid = _validity(summary)
    if valid is not None:
        base["valid"] = valid
    metrics = summary.get("metrics") if isinstance(summary.get("metrics"), Mapping) else {}
    points = metrics.get(POINTS_KEY)
    shared = flatten({k: v for k, v in metrics.items() if k != POINTS_KEY})
    if isinstance(points, list) and points and all(isinstance(p, Mapping) for p in points):
        return [{**base, "point": i, **shared, **flatten(p)} for i, p in enumerate(points)]
    return [{**base, **shared}]  # summaries are written redacted already


def _relative(folder: Path, root: Path) -> str:
    try:
        return str(Path(folder).resolve().relative_to(Path(root).resolve()))
    except ValueError:
        return str(folder)


def sweep_table(jobs: Sequence[PlannedJob], sweep_dir: Path, since: Optional[datetime] = None) -> pd.DataFrame:
    """Every job's rows, in the sweep's order."""
    rows = [row for job in jobs for row in job_rows(job, sweep_dir, since)]
    import pandas as pd  # here, not at the top: every run creates the sweep callback that imports this module

    table = pd.DataFrame(rows)
    keys = [c for c in FIXED_COLUMNS if c in table.columns]
    return table[keys + [c for c in table.columns if c not in keys]]


def count_failures(table: pd.DataFrame) -> int:
    """Jobs that did not end ``ok`` (failed or missing), counted once per job."""
    if table.empty:
        return 0
    per_job = table.drop_duplicates("folder")
    return int((per_job["status"] != "ok").sum())
