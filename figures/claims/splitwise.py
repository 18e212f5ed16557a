"""Splitwise (ISCA'24) claims: iso-power and iso-cost throughput, pool sizing."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import pandas as pd

from figures.claims.base import (
    Claim,
    MissingData,
    Outcome,
    Setup,
    direction_outcome,
    need_columns,
)
from figures.study_tables import (
    JobFolder,
    splitwise_chosen,
)

SPLITWISE = "Splitwise ISCA'24"


def _chosen(job: JobFolder, trace: str, budget: str, designs: tuple[str, ...]) -> pd.DataFrame:
    table = job.table()
    need_columns(table, "trace", "budget", "design", "chosen", "max_rate_rps")
    chosen = splitwise_chosen(table)
    rows = chosen[(chosen["trace"] == trace) & (chosen["budget"] == budget)].set_index("design")
    missing = [d for d in designs if d not in rows.index]
    if missing:
        raise MissingData(f"no feasible {trace}/{budget} row for {', '.join(missing)}")
    return rows


def splitwise_vs(design: str, reference: str, budget: str, trace: str = "azure_conv",
                 cheaper: bool = False) -> Callable[[JobFolder], Outcome]:
    """Throughput of ``design``'s best split over ``reference``'s under one budget (and, with
    ``cheaper``, at a cost no higher than the reference's)."""

    def compute(job: JobFolder) -> Outcome:
        rows = _chosen(job, trace, budget, (design, reference))
        a, b = rows.loc[design], rows.loc[reference]
        ratio = a["max_rate_rps"] / b["max_rate_rps"]
        cost = a["cost_usd_hr"] / b["cost_usd_hr"] - 1.0
        power = a["power_kw"] / b["power_kw"] - 1.0
        value = (f"{ratio:.2f}x ({a['split']} {a['max_rate_rps']:.2f} vs {b['split']} {b['max_rate_rps']:.2f} req/s; "
                 f"cost {cost:+.0%}, power {power:+.0%})")
        holds = bool(ratio > 1 and (not cheaper or cost <= 0))
        reason = f"{trace}, iso-{budget}, each design's best machine split"
        if cheaper and cost > 0:
            reason += "; not cheaper than the reference"
        return direction_outcome(value, holds, reason)

    compute.__name__ = f"splitwise_{design}_vs_{reference}_{budget}"
    return compute


def _prompt_share(split: str) -> float:
    """Prompt machines over prompt + token machines of a ``<n>P/<m>T`` split (NaN otherwise)."""
    match = re.fullmatch(r"(\d+)P/(\d+)T", str(split))
    if not match:
        return math.nan
    prompt, token = int(match.group(1)), int(match.group(2))
    return prompt / (prompt + token)


def splitwise_pool_sizing(job: JobFolder) -> Outcome:
    shares = {}
    splits = {}
    for trace in ("azure_code", "azure_conv"):
        rows = _chosen(job, trace, "power", ("splitwise_hh",))
        shares[trace] = _prompt_share(rows.loc["splitwise_hh", "split"])
        splits[trace] = rows.loc["splitwise_hh", "split"]
    holds = bool(shares["azure_code"] > shares["azure_conv"])
    value = (f"coding {splits['azure_code']} ({shares['azure_code']:.0%} prompt) vs conversation "
             f"{splits['azure_conv']} ({shares['azure_conv']:.0%} prompt)")
    reason = "Splitwise-HH, iso-power; " + ("coding gets the larger prompt share" if holds
                                            else "coding does not get the larger prompt share")
    return direction_outcome(value, holds, reason)


SPLITWISE_SETUP = Setup(
    paper="Llama2-70B, DGX-A100/H100 machines, clusters of tens of machines at iso-power and iso-cost, full-hour Azure "
          "code and conversation traces, SLOs as slowdowns over an unloaded reference",
    ours="budget of 7 A100 machines, 600 requests per trace, our token-phase timing",
    differences=("cluster size: 7 A100-equivalents, not the paper's", "trace: 600 requests, not the full hour",
                 "interconnect per node, not per GPU"))


CLAIMS: tuple[Claim, ...] = (
    Claim("splitwise_aa_isopower", SPLITWISE,
          "Iso-power, conversation: Splitwise-AA out-serves Baseline-A100 (§6.2, Fig. 18a [P])",
          "2.15x throughput", "splitwise_provisioning", splitwise_vs("splitwise_aa", "baseline_a100", "power"),
          setup=SPLITWISE_SETUP),
    Claim("splitwise_ha_isopower", SPLITWISE,
          "Iso-power, conversation: Splitwise-HA out-serves Baseline-A100 at lower cost (§6.2, Fig. 18a [P])",
          "1.18x throughput at 10% lower cost", "splitwise_provisioning",
          splitwise_vs("splitwise_ha", "baseline_a100", "power", cheaper=True),
          setup=SPLITWISE_SETUP),
    Claim("splitwise_aa_isocost", SPLITWISE,
          "Iso-cost, conversation: Splitwise-AA out-serves Baseline-H100 (§6.3, Fig. 18b [P])",
          "1.4x throughput (+25% power)", "splitwise_provisioning",
          splitwise_vs("splitwise_aa", "baseline_h100", "cost"),
          setup=SPLITWISE_SETUP),
    Claim("splitwise_pool_sizing", SPLITWISE,
          "Pool sizes follow the workload: coding (long prompts, few tokens) gets a larger share of prompt "
          "machines than conversation (iso-power Splitwise-HH, §6.2 [P])",
          "coding 35P/5T (88% prompt) vs conversation 25P/15T (62% prompt)", "splitwise_provisioning",
          splitwise_pool_sizing,
          setup=SPLITWISE_SETUP),
)
