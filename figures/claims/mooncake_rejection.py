"""Mooncake (arXiv 2407.00079 v3, §7, §8.2, Table 3) early rejection under overload, computed from the
``mooncake_rejection`` experiment: rejected requests under per-stage, early and prediction-based admission."""

from __future__ import annotations

import numpy as np
import pandas as pd

from figures.claims.base import (
    DIRECTION,
    FAILS,
    MAGNITUDE_BAND,
    MATCHES,
    Claim,
    Experiment,
    MissingData,
    Outcome,
    Setup,
)
from figures.study_tables import JobFolder, rejection_table
from vocab.result_files import LOAD_FILE

ARXIV_MC = "Mooncake arXiv 2407.00079"


PAPER_REJECTED = (4183, 3771, 3589)  # baseline / early / predictive, arXiv v3 Table 3 [P]
JUDGED_SPLIT = "8P8D"
MODES = ("baseline", "early", "predictive")


def _decode_tbt_ratio(job: JobFolder, variants: list[str]) -> dict[str, tuple[float, float]]:
    """(time mean, max) of the decode pool's average TBT ratio (mean estimated step / TBT SLO) per variant,
    from ``load.csv``; empty when the job sampled no decode step times."""
    tbt_ms = job.setting("slo.tbt_ms")
    if not job.has(LOAD_FILE) or not isinstance(tbt_ms, int | float) or tbt_ms <= 0:
        return {}
    load = job.table(LOAD_FILE)
    if "step_s" not in load:
        return {}
    decode = load[(load["role"] == "decode") & load["variant"].isin(variants)]
    per_time = decode.groupby(["variant", "time_s"])["step_s"].mean() / (tbt_ms / 1000.0)
    return {v: (float(s.mean()), float(s.max())) for v, s in per_time.groupby(level="variant")}


def _prefill_swing(job: JobFolder, variants: list[str]) -> dict[str, float]:
    """Per variant, the mean absolute change of the prefill pool's mean queue (s) between successive load
    samples while any work is queued: how much the prefill load swings (Mooncake's oscillation)."""
    if not job.has(LOAD_FILE):
        return {}
    load = job.table(LOAD_FILE)
    prefill = load[(load["role"] == "prefill") & load["variant"].isin(variants)]
    out = {}
    for variant, part in prefill.groupby("variant"):
        queue = part.groupby("time_s")["queued_prefill_s"].mean().sort_index()
        active = queue[: queue[queue > 0].index.max()] if (queue > 0).any() else queue
        out[str(variant)] = float(active.diff().abs().mean()) if len(active) > 1 else 0.0
    return out


def _split_line(rows: pd.DataFrame) -> str:
    by_mode = rows.set_index("mode")

    def series(column: str, fmt: str) -> str:
        if column not in by_mode:
            return "n/a"
        return " / ".join(format(float(by_mode.loc[m, column]), fmt) for m in MODES)

    line = f"{series('n_rejected', ',.0f')} rejected"
    if "goodput_rps" in by_mode:
        line += f", goodput {series('goodput_rps', '.2f')} req/s"
    if "sim_wasted_prefill_tokens" in by_mode:
        wasted = by_mode["sim_wasted_prefill_tokens"].astype(float)
        computed = by_mode.get("sim_prefill_tokens_computed")
        share = (f" ({wasted['baseline'] / float(computed['baseline']):.1%} of baseline's prefill)"
                 if computed is not None and float(computed["baseline"]) > 0 else "")
        line += f", wasted prefill {' / '.join(f'{wasted[m] / 1e6:.1f}M' for m in MODES)} tokens{share}"
    return line


def _ordered(rows: pd.DataFrame) -> bool:
    counts = rows.set_index("mode")["n_rejected"].astype(float)
    return bool(counts["baseline"] > counts["early"] > counts["predictive"])


def mooncake_rejection(job: JobFolder) -> Outcome:
    table = rejection_table(job.table())
    if "n_rejected" not in table:
        raise MissingData("study.csv has no column n_rejected")
    splits = {s: rows for s, rows in table.groupby("split", sort=False) if set(MODES) <= set(rows["mode"])}
    if JUDGED_SPLIT not in splits:
        raise MissingData(f"no {JUDGED_SPLIT} split with baseline, early and predictive variants "
                          f"(splits: {', '.join(splits) or 'none'})")
    judged = splits[JUDGED_SPLIT]
    names = [f"{s}/{m}" for s in splits for m in MODES]
    ratios, swings = _decode_tbt_ratio(job, names), _prefill_swing(job, names)
    interval = job.setting("engine.sample_interval_s", "?")

    def decode_note(split: str) -> str:
        note = ""
        values = [ratios[f"{split}/{m}"] for m in MODES if f"{split}/{m}" in ratios]
        if values:
            note += (f"; decode TBT ratio over time: mean {np.mean([v[0] for v in values]):.2f}, "
                     f"max {max(v[1] for v in values):.2f}")
        if all(f"{split}/{m}" in swings for m in MODES):
            note += (f"; prefill-queue swing between load samples {interval} s apart (mean |change|, b / e / p): "
                     + " / ".join(f"{swings[f'{split}/{m}']:.2f} s" for m in MODES))
        return note

    value = f"{JUDGED_SPLIT}: {_split_line(judged)}" + "".join(
        f"; sensitivity {s}: {_split_line(rows)}" for s, rows in splits.items() if s != JUDGED_SPLIT)
    counts = judged.set_index("mode")["n_rejected"].astype(float)
    if _ordered(judged) and counts["baseline"] > 0:
        early_cut, pred_cut = (1 - counts[m] / counts["baseline"] for m in ("early", "predictive"))
        paper_early, paper_pred = (1 - n / PAPER_REJECTED[0] for n in PAPER_REJECTED[1:])
        close = all(p * (1 - MAGNITUDE_BAND) <= o <= p * (1 + MAGNITUDE_BAND)
                    for o, p in ((early_cut, paper_early), (pred_cut, paper_pred)))
        verdict = MATCHES if close else DIRECTION
        reason = (f"baseline > early > predictive on {JUDGED_SPLIT}; early and predictive reject {early_cut:.1%} and "
                  f"{pred_cut:.1%} fewer than baseline (paper: {paper_early:.1%}, {paper_pred:.1%})")
        return Outcome(value, verdict, reason + decode_note(JUDGED_SPLIT))
    reason = f"baseline > early > predictive does not hold on {JUDGED_SPLIT}" + decode_note(JUDGED_SPLIT)
    found = []
    for split, rows in splits.items():
        if split == JUDGED_SPLIT:
            continue
        state = "flips it (baseline > early > predictive)" if _ordered(rows) else "does not flip it"
        counts_s = rows.set_index("mode").loc[list(MODES), "n_rejected"]
        found.append(f"{split} {state}: {' / '.join(f'{int(n):,}' for n in counts_s)} rejected{decode_note(split)}")
    sensitivity = ("; ".join(found) if found else "no sensitivity split was run")
    return Outcome(value, FAILS, reason, sensitivity)


REJECTION_SETUP = Setup(
    paper="8 prefill + 8 decode instances, the arXiv trace (~23k requests) replayed at 2x speed; baseline: per-stage "
          "checks when each stage starts (a request can be rejected at decode after its prefill ran); early "
          "rejection: at arrival, from both pools' loads; prediction: system-level, a uniform decode time t_d and "
          "the average TBT ratio over decode instances against the threshold; metric: rejected requests (Table 3)",
    ours="simulated 8P+8D of 8x A800 (TP8, Llama-3.1-70B shape), the conversation trace at 2x speed, SLO TTFT 30 s / "
         "TBT 100 ms, the three policies as defined there (t_d: the mean decode time of the requests finished so "
         "far), with goodput and wasted prefill; sensitivity 8P1D: one decode instance, where both pools saturate "
         "(experiment mooncake_rejection)",
    differences=("trace: the conversation trace (FAST'25, 12,031 requests) stands in for the arXiv trace, which is "
                 "not public here; the paper's counts are on ~23k requests, so only the ordering and the relative "
                 "reductions compare",
                 "in our model the stand-in at 8P+8D saturates the prefill pool but not the decode pool (its "
                 "decode TBT ratio is in the outcome); no trace we have saturates both at 8P+8D, hence the 8P1D "
                 "sensitivity",
                 "section 8.2 states no TBT threshold: ours is 100 ms (the paper's section 8.1.3)"))


EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment("mooncake_rejection", "Mooncake arXiv early rejection (Table 3)", REJECTION_SETUP),
)

CLAIMS: tuple[Claim, ...] = (
    Claim("mooncake_rejection", ARXIV_MC,
          "Early rejection rejects fewer requests than per-stage rejection, and prediction-based early rejection "
          "fewer still (8P+8D, trace at 2x speed; §8.2, Table 3 [P])",
          "4,183 / 3,771 / 3,589 rejected (baseline / early / predictive)", "mooncake_rejection", mooncake_rejection,
          figures=("rejection", "rejection_load"), title="Mooncake early rejection"),
)
