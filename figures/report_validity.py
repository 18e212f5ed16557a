"""The validity part of the reproduction report (:mod:`figures.report`): whether a job is INVALID and why
(``summary.json``'s ``validity`` block, ``docs/metrics.md``), and the "Run validity" section: every newest job,
valid / INVALID (with reasons) / not assessed, and each variant of a real-process comparison (``job=compare``)
with its numbers, the CPU that processes outside the job took during it and the host's steal time."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

import pandas as pd

from figures.report_markdown import cell, heading
from figures.study_tables import JobFolder
from vocab.records import block_reasons
from vocab.result_files import STUDY_FILE

INVALID = "INVALID"
VALIDITY_ANCHOR = "run-validity"
# study.csv columns shown for each variant of a real-process comparison
_COMPARE_COLUMNS = (("p90 TTFT ms", "p90_ttft_ms"), ("p90 TPOT ms", "p90_tpot_ms"), ("goodput req/s", "goodput_rps"))
# host interference of each variant (harness/host_load.py): study.csv column, else its validity block's
_HOST_COLUMNS = (("outside CPU (cores)", "outside_cpu_share"), ("steal", "steal_share"))


def validity_reasons(summary: dict) -> Optional[list[str]]:
    """The reasons a job is invalid (its parts' reasons included), or None when it is valid or was not
    assessed (no ``validity`` block)."""
    block = summary.get("validity") or {}
    if not block or block.get("valid", True) is not False:
        return None
    return block_reasons(block)


def invalid_note(summary: dict) -> str:
    """``**INVALID**: reason; reason`` for an invalid job, else ""."""
    reasons = validity_reasons(summary)
    return "" if reasons is None else f"**{INVALID}**: {'; '.join(reasons)}"


def number(value: object) -> str:
    """``value`` with 3 significant digits, ``-`` when it is not a number."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "-"
    return "-" if number != number else f"{number:.3g}"


def _host_value(row: pd.Series, block: Optional[dict], column: str) -> Optional[float]:
    """A variant's outside-CPU or steal share: its ``study.csv`` column, else the largest over its validity
    block (and its points'); None when not measured."""
    values = [row.get(column)]
    if block:
        values += [(part.get("host_load") or {}).get(column) for part in [block, *(block.get("points") or [])]]
    for value in values:
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        if number == number:
            return number
    return None


def _host_cells(row: pd.Series, block: Optional[dict]) -> list[str]:
    share, steal = (_host_value(row, block, column) for _, column in _HOST_COLUMNS)
    return ["-" if share is None else f"{share:.2f}", "-" if steal is None else f"{steal:.0%}"]


def _compare_lines(job: JobFolder) -> list[str]:
    """One table row per variant of a ``job=compare`` folder, invalid ones marked with their reasons, with the
    CPU used outside the job and the steal time during its point."""
    variants = (job.summary.get("validity") or {}).get("variants") or {}
    file = job.path / STUDY_FILE
    table = pd.read_csv(file) if file.is_file() else pd.DataFrame({"variant": list(variants)})
    names = [name for name, _ in (*_COMPARE_COLUMNS, *_HOST_COLUMNS)]
    header = "| Variant | " + " | ".join(names) + " | Validity |"
    lines = ["", header, "|---" * (len(names) + 2) + "|"]
    for _, row in table.iterrows():
        name = str(row["variant"])
        block = variants.get(name)
        status = row.get("status", "ok")
        if isinstance(status, str) and status != "ok":
            verdict = f"**failed**: {row.get('reason', '')}"
        elif block is not None:
            reasons = block_reasons(block) if block.get("valid") is False else None
            verdict = "valid" if reasons is None else f"**{INVALID}**: {'; '.join(reasons)}"
        elif "valid" in table and str(row.get("valid")).lower() == "false":
            verdict = f"**{INVALID}**: {row.get('validity_reasons', '') or 'no reason recorded'}"
        else:
            verdict = "not assessed"
        cells = [number(row.get(column)) for _, column in _COMPARE_COLUMNS] + _host_cells(row, block)
        lines.append(f"| {cell(name)} | " + " | ".join(cells) + f" | {cell(verdict)} |")
    return lines


def validity_section(jobs: Mapping[str, JobFolder]) -> list[str]:
    """The "Run validity" section: every newest job, valid / INVALID (with reasons) / not assessed, and the
    variants of every real-process comparison."""
    lines = [*heading("Run validity", VALIDITY_ANCHOR),
             "Each job's `validity` block (`docs/metrics.md`): minimum scheduled duration and requests, errors, "
             "unfinished requests, issue lag, achieved against offered rate, and 95% order-statistic bounds of "
             "p90/p99 TTFT and TPOT; for real processes also host interference (CPU used by processes outside "
             "the job, in cores, and the host's steal time, during each measured point) and overload (queues that "
             "grew through the whole run). Numbers of an INVALID job are not fit to report.", ""]
    for name in sorted(jobs):
        job = jobs[name]
        block = job.summary.get("validity") or {}
        note = invalid_note(job.summary)
        state = note or ("valid" if block else "not assessed (this job kind writes no validity block)")
        lines.append(f"- `{name}` (`{job.path.name}`): {state}")
        if job.summary.get("kind") == "compare" or "variants" in block:
            lines += [f"  {line}" if line else "" for line in _compare_lines(job)]
            lines.append("")
    return lines
