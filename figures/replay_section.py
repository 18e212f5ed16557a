"""The report's section "Does the simulator reproduce real GPU runs?": the newest ``distserve_real_replay`` job
(:mod:`harness.studies.real_replay`), its per-run table of measured against predicted latencies and attainment,
the fitted profile corrections, and its three figures (:mod:`figures.real_replay`)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from figures.report_markdown import Section
from figures.study_tables import JobFolder
from vocab.result_files import FIGURES_DIR, REPLAY_FIT_FILE, REPLAY_RUNS_FILE

REAL_REPLAY = "distserve_real_replay"
TITLE = "Does the simulator reproduce real GPU runs?"
FIGURES = ("replay_quantiles", "replay_attainment", "replay_overload")
_LATENCIES = (("ttft_p50", "TTFT p50"), ("ttft_p90", "TTFT p90"), ("tpot_p50", "TPOT p50"), ("tpot_p90", "TPOT p90"))


def _ms(measured: float, predicted: float) -> str:
    if not (math.isfinite(measured) and math.isfinite(predicted)) or measured == 0:
        return f"{measured:.0f} / {predicted:.0f}"
    return f"{measured:.0f} / {predicted:.0f} ({(predicted - measured) / measured:+.0%})"


def _points(measured: float, predicted: float) -> str:
    return f"{measured:.0f} / {predicted:.0f} ({predicted - measured:+.0f})"


def _within(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return "yes" if value in (True, "True") else "**no**"


def run_rows(runs: pd.DataFrame) -> list[str]:
    """The per-run markdown table: measured / predicted (relative error) per latency quantile, attainment in
    points, overload on each side, and whether the run met every target (``-``: not a target run)."""
    pairs = [c[len("measured_attainment_"):] for c in runs.columns if c.startswith("measured_attainment_")]
    head = ["run", "layout", "role", *(name for _, name in _LATENCIES),
            *(f"attainment {p.replace('_', '/')} ms (%)" for p in pairs), "overload (measured / predicted)",
            "within targets"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in runs.iterrows():
        cells = [f"`{r['run']}`", str(r["layout"]), str(r["role"]),
                 *(_ms(float(r[f"measured_{k}"]), float(r[f"predicted_{k}"])) for k, _ in _LATENCIES),
                 *(_points(float(r[f"measured_attainment_{p}"]), float(r[f"predicted_attainment_{p}"])) for p in pairs),
                 f"{'yes' if r['overloaded_measured'] else 'no'} / {'yes' if r['overloaded_predicted'] else 'no'}",
                 _within(r["within_targets"])]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def fit_lines(fit: pd.DataFrame) -> list[str]:
    """One line per fitted correction and the untagged runs' layout choice."""
    lines = []
    for _, r in fit[fit["system"].isin(["vllm", "distserve"])].iterrows():
        lines.append(f"- {r['system']}: prefill x{r['prefill_scale']:.3g}, {r['step_ms']:+.3g} ms per decode step, "
                     f"{r['seq_ms']:+.3g} ms per sequence, fitted on `{r['fit_runs']}` (not scored)")
    choice = fit[fit["system"] == "distserve-untagged-layout"]
    if not choice.empty:
        best = choice.sort_values(["objective", "n_gpus"]).iloc[0]
        tried = ", ".join(f"{r['layout']} ({r['objective']:.3f})" for _, r in choice.iterrows())
        lines.append(f"- untagged `distserve-*` runs: layout from `{best['run']}` (not scored), the candidate closest "
                     f"to it, ties to fewer GPUs (mean squared log error of TTFT and TPOT p50/p90: {tried})")
    return lines


def real_replay_section(jobs: Mapping[str, JobFolder]) -> Section:
    """The section, from the newest ``distserve_real_replay`` job; a line saying how to run it when there is none."""
    job = jobs.get(REAL_REPLAY)
    if job is None or not job.has(REPLAY_RUNS_FILE):
        return Section(TITLE, f"Not run: `python -m harness.reproduce --only {REAL_REPLAY}` (docs/simulator.md).")
    runs = job.table(REPLAY_RUNS_FILE)
    fit = job.table(REPLAY_FIT_FILE) if job.has(REPLAY_FIT_FILE) else pd.DataFrame(columns=["system"])
    metrics = job.summary.get("metrics") or {}
    scope = runs[runs["in_target_scope"]]
    agree = int(runs["overload_agrees"].sum())
    body = [
        f"`{job.path}`: the DistServe authors' own runs of real DistServe and real vLLM serving OPT-13B on A100 GPUs "
        "(`distserve_opt13b_a100`, 24 runs), each replayed in the simulator with its own requests, arrivals and "
        "layout; TTFT = first token - arrival, TPOT = (completion - first token) / (output tokens - 1) on both sides.",
        "",
        f"**{int(scope['within_targets'].sum())} of {len(scope)} target runs meet every target** (medians within "
        f"10%, p90 within 20%, attainment within 5 points; target runs: scored, measured p90 TTFT under 1 s); "
        f"{metrics.get('n_checks_within', '?')} of {metrics.get('n_checks_in_scope', '?')} checks; overload "
        f"(TTFT growing through the run) predicted as measured on **{agree} of {len(runs)} runs**. Cells are "
        "measured / predicted (error).",
        "",
        "Profile corrections (`engine.profile_adjust`) and layout choice:",
        "",
        *fit_lines(fit),
        "",
        "Modelled from the real systems' code: a pipelined decode instance's step is the sum of its stages "
        "(simdistserve `base/worker.py`), and DistServe's prefill keeps a request's KV until the decode instance has "
        "room (`engine.kv_handoff=pull`, `distserve/decoding_stage_scheduler.py`). docs/simulator.md lists every "
        "remaining miss with its measured cause.",
        "",
        *run_rows(runs),
    ]
    return Section(TITLE, "\n".join(body), figures=tuple(job.path / FIGURES_DIR / f"{f}.png" for f in FIGURES),
                   figure_hint=f"run `python -m figures --results-dir {job.path.parent.parent} "
                               f"--experiment {REAL_REPLAY}`", name="real-gpu-runs")
