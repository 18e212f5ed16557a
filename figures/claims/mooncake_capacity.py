"""Mooncake (FAST'25) effective-request-capacity claims (Fig. 1, 6, 7)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from figures.claims.base import (
    Bounded,
    Claim,
    MissingData,
    Outcome,
    Setup,
    capacity_or_missing,
    direction_outcome,
    format_range,
    greater_than_one,
    need_columns,
    ratio_range,
)
from figures.study_tables import (
    JobFolder,
    capacity_ratios,
    capacity_table,
)

FAST25 = "Mooncake FAST'25"
ARXIV_MC = "Mooncake arXiv 2407.00079"


def _capacity_gains(job: JobFolder, trace: str) -> pd.DataFrame:
    table = job.table()
    need_columns(table, "variant", "offered_rate_rps")
    gains = capacity_ratios(capacity_or_missing(lambda: capacity_table(job)))
    gains = gains[gains["trace"] == trace]
    if gains.empty:
        raise MissingData(f"no {trace}/mooncake and {trace}/vllm variants")
    return gains


def _gain_text(row: pd.Series) -> tuple[str, bool, str]:
    a = Bounded(float(row["system_capacity_rps"]), str(row["system_bound"]), float(row["system_lowest"]),
                str(row["system_label"]))
    b = Bounded(float(row["vllm_capacity_rps"]), str(row["vllm_bound"]), float(row["vllm_lowest"]),
                str(row["vllm_label"]))
    lo, hi = ratio_range(a, b)
    gain = format_range(lo - 1.0, hi - 1.0, lambda g: f"{g:+.0%}", floor=-1.0)
    text = f"{gain} (Mooncake {a} vs vLLM {b} req/s)"
    holds, note = greater_than_one(lo, hi)
    return text, holds, note


def mooncake_capacity_at(threshold_ms: float) -> Callable[[JobFolder], Outcome]:
    def compute(job: JobFolder) -> Outcome:
        gains = _capacity_gains(job, "conversation")
        row = gains[np.isclose(gains["tbt_threshold_ms"].astype(float), threshold_ms)]
        if row.empty:
            raise MissingData(f"study.csv has no attainment_tbt_{threshold_ms:g}ms column")
        text, holds, note = _gain_text(row.iloc[0])
        reason = "capacity = highest offered rate with >= 90% of requests within TTFT 30 s and TBT " \
                 f"{threshold_ms:g} ms, interpolated between replay speeds"
        return direction_outcome(text, holds, "; ".join(x for x in (reason, note) if x))

    compute.__name__ = f"mooncake_capacity_{threshold_ms:g}ms"
    return compute


def mooncake_capacity_synthetic(job: JobFolder) -> Outcome:
    gains = _capacity_gains(job, "synthetic")
    texts, verdicts, notes = [], [], []
    for _, row in gains.iterrows():
        text, holds, note = _gain_text(row)
        texts.append(f"{row['tbt_threshold_ms']:g} ms: {text}")
        verdicts.append(holds)
        if note:
            notes.append(f"{row['tbt_threshold_ms']:g} ms {note}")
    reason = "holds only if Mooncake's capacity is higher at every threshold"
    return direction_outcome("; ".join(texts), all(verdicts), "; ".join([reason, *notes]))

MOONCAKE_CAPACITY_SETUP = Setup(
    paper="16 nodes of 8x A800 (LLaMA3-70B architecture), Mooncake vs vLLM, vLLM + prefix caching and vLLM + chunked "
          "prefill (v0.5.1), the trace replayed at its own load; metric: proportion of requests with TTFT <= 30 s and "
          "TBT (mean of the slowest 10% of intervals) <= 100/200/300 ms",
    ours="simulated 16 nodes (Mooncake 8P+8D, vLLM 16 instances), replay speed swept; capacity = highest rate at which "
         ">= 90% of requests are effective",
    differences=("metric: a rate capacity, not the proportion at the trace's load",
                 "baselines: plain vLLM only, no prefix-caching or chunked-prefill vLLM"))


CLAIMS: tuple[Claim, ...] = (
    Claim("mooncake_capacity_100", FAST25,
          "Mooncake raises effective request capacity over vLLM on the conversation trace, TBT threshold I "
          "(100 ms) (Fig. 1 [S]; baseline variant per label unverified)",
          "+498%", "mooncake_capacity", mooncake_capacity_at(100),
          setup=MOONCAKE_CAPACITY_SETUP),
    Claim("mooncake_capacity_200", FAST25,
          "Same, TBT threshold II (200 ms) (Fig. 1 [S])", "+157%", "mooncake_capacity", mooncake_capacity_at(200),
          setup=MOONCAKE_CAPACITY_SETUP),
    Claim("mooncake_capacity_300", FAST25,
          "Same, TBT threshold III (300 ms) (Fig. 1 [S])", "+59%", "mooncake_capacity", mooncake_capacity_at(300),
          setup=MOONCAKE_CAPACITY_SETUP),
    Claim("mooncake_capacity_synthetic", FAST25,
          "Mooncake raises effective request capacity on the synthetic trace at every TBT threshold (Fig. 7 [S])",
          "+62% / +40% / +28% (100 / 200 / 300 ms)", "mooncake_capacity", mooncake_capacity_synthetic,
          setup=MOONCAKE_CAPACITY_SETUP),
)
