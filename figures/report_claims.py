"""The papers' claims the reproduction report checks, kept as data.

Each :class:`Claim` names the paper's qualitative claim (with its citation), the paper's number as
published, the experiment preset that reproduces it, and a function that computes *our* number from
that experiment's newest finished job folder (its ``study.csv``; the placement search also its
``placement.json``) and says whether the claim holds here. Nothing of ours is typed in.

Citation tags follow the research notes the numbers come from: [P] read in the paper's own text,
[S] a secondary transcription that quotes the paper (figure labels of the FAST'25 PDF, arXiv tables).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from figures.study_tables import (
    JobFolder,
    MissingCapacity,
    capacity_ratios,
    capacity_table,
    pareto_table,
    rejection_table,
    slo_goodput_table,
    splitwise_chosen,
)
from harness.result_files import PLACEMENT_FILE


class MissingData(Exception):
    """The job folder exists but lacks what the claim needs (an older or reduced preset)."""


@dataclass(frozen=True)
class Bounded:
    """A capacity as the study wrote it (``capacity.csv``): its value, how the measured loads bound it
    (``exact``, ``at_least``, ``below_range``), the lowest load measured, and its label."""

    value: float
    bound: str
    lowest: float
    label: str

    def __str__(self) -> str:
        return self.label


@dataclass(frozen=True)
class Outcome:
    """Our number (formatted), whether the claim holds with it, and why."""

    value: str
    holds: bool
    reason: str


@dataclass(frozen=True)
class Claim:
    """One paper claim: who claims it, what, the published number, and how we compute ours."""

    key: str
    paper: str
    claim: str
    paper_number: str
    experiment: str
    compute: Callable[[JobFolder], Outcome]

    @property
    def command(self) -> str:
        return f"python -m harness experiment={self.experiment}"


# ---------------------------------------------------------------------------------------------- helpers

def _capacity(read: Callable[[], pd.DataFrame]) -> pd.DataFrame:
    """A table read from the study's ``capacity.csv``; ``MissingData`` when the study wrote none."""
    try:
        return read()
    except MissingCapacity as exc:
        raise MissingData(str(exc)) from exc


def _need(table: pd.DataFrame, *columns: str) -> None:
    missing = [c for c in columns if c not in table]
    if missing:
        raise MissingData(f"study.csv has no column {', '.join(missing)}")


def _interval(c: Bounded) -> tuple[float, float]:
    """The range a capacity can lie in, given how the measured points bound it."""
    if c.bound == "at_least":
        return c.value, math.inf
    if c.bound == "below_range":
        return 0.0, c.lowest
    return c.value, c.value


def ratio_range(a: Bounded, b: Bounded) -> tuple[float, float]:
    """The range of a / b over the ranges the two capacities can lie in."""
    a_lo, a_hi = _interval(a)
    b_lo, b_hi = _interval(b)
    lo = a_lo / b_hi if b_hi > 0 else (math.inf if a_lo > 0 else 0.0)
    hi = a_hi / b_lo if b_lo > 0 else math.inf
    return lo, hi


def format_range(lo: float, hi: float, fmt: Callable[[float], str], floor: float = 0.0) -> str:
    """``x`` / ``>=x`` / ``<=x`` / ``x to y`` / ``n/a`` (nothing known) for a range whose smallest
    possible value is ``floor`` (0 for a ratio, -1 for a relative gain)."""
    if lo == hi:
        return fmt(lo)
    if lo <= floor and math.isinf(hi):
        return "n/a"
    if math.isinf(hi):
        return f">={fmt(lo)}"
    if lo <= floor:
        return f"<={fmt(hi)}"
    return f"{fmt(lo)} to {fmt(hi)}"


def greater_than_one(lo: float, hi: float) -> tuple[bool, str]:
    """Whether a ratio range shows 'greater than 1', and a note when the range leaves it open."""
    if lo > 1:
        return True, ""
    if hi <= 1:
        return False, ""
    return False, "inconclusive: the measured loads do not pin the ratio down (extend the study's load points)"


# ---------------------------------------------------------------------------------------------- DistServe

def distserve_goodput(job: JobFolder) -> Outcome:
    """DistServe's per-GPU goodput over vLLM's, on azure_conv when the job has it."""
    table = job.table()
    _need(table, "variant", "per_gpu_rate", "slo_attainment")
    goodput = _capacity(lambda: slo_goodput_table(job, str(job.setting("workload.name", ""))))
    parts = []
    results: dict[str, tuple[float, float]] = {}
    for workload, group in goodput.groupby("workload", sort=False):
        ds = group[group["system"].str.lower() == "distserve"]
        vl = group[group["system"].str.lower() == "vllm"]
        if ds.empty or vl.empty:
            continue
        a, b = (Bounded(float(x["goodput_rps_per_gpu"].iloc[0]), str(x["bound"].iloc[0]),
                        float(x["lowest_measured"].iloc[0]), str(x["label"].iloc[0])) for x in (ds, vl))
        results[workload] = ratio_range(a, b)
        ratio = format_range(*results[workload], lambda r: f"{r:.2f}x")
        parts.append(f"{workload}: {ratio} (DistServe {a} vs vLLM {b} req/s/GPU)")
    if not results:
        raise MissingData("no workload has both a DistServe and a vLLM variant")
    judged = "azure_conv" if "azure_conv" in results else next(iter(results))
    holds, note = greater_than_one(*results[judged])
    reason = f"judged on {judged} (no prefix reuse, like DistServe's ShareGPT chatbot)" if judged == "azure_conv" \
        else f"judged on {judged}: this job has no azure_conv variants"
    return Outcome("; ".join(parts), holds, "; ".join(x for x in (reason, note) if x))


def distserve_placement(job: JobFolder) -> Outcome:
    """The placement search's chosen layout against the DistServe README's."""
    if not job.has(PLACEMENT_FILE):
        raise MissingData(f"the job wrote no {PLACEMENT_FILE}")
    report = job.json(PLACEMENT_FILE)
    chosen = report.get("chosen")
    if not chosen:
        raise MissingData("placement.json has no chosen configuration")
    rate = report.get("per_gpu_goodput_rps")
    workload = (report.get("workload") or {}).get("name", "?")
    p_tp, d_tp = chosen.get("prefill_tp"), chosen.get("decode_tp")
    p_pp, d_pp = chosen.get("prefill_pp", 1), chosen.get("decode_pp", 1)
    value = (f"{chosen.get('n_prefill')} x prefill TP{p_tp} PP{p_pp} + {chosen.get('n_decode')} x decode "
             f"TP{d_tp} PP{d_pp}; " + (f"{rate:.2f} req/s/GPU" if rate is not None else "no goodput"))
    holds = (p_tp, d_tp, p_pp, d_pp) == (2, 1, 1, 1)
    reason = "same layout as the README" if holds else "a different layout from the README's"
    return Outcome(value, holds, f"{reason}; rates differ with the workload ({workload}, not ShareGPT)")


def distserve_pareto(job: JobFolder) -> Outcome:
    """Tightest SLO scale each system meets (p90 TTFT and TPOT within scale x SLO), vLLM over DistServe."""
    table = job.table()
    _need(table, "variant", "p90_ttft_ms", "p90_tpot_ms", "slo_attainment")
    ttft = float(job.setting("slo.ttft_ms", 250.0) or 250.0)
    tpot = float(job.setting("slo.tpot_ms", 100.0) or 100.0)
    data = pareto_table(table, ttft, tpot)
    best = data.loc[data.groupby("system")["slo_scale"].idxmin()].set_index("system")
    names = {s.lower(): s for s in best.index}
    if "distserve" not in names or "vllm" not in names:
        raise MissingData("the job needs both vLLM and DistServe variants")
    ds, vl = best.loc[names["distserve"]], best.loc[names["vllm"]]
    ratio = vl["slo_scale"] / ds["slo_scale"]
    value = (f"{ratio:.2f}x (tightest SLO scale: DistServe {ds['slo_scale']:.2f} with {ds['variant']}, "
             f"vLLM {vl['slo_scale']:.2f} with {vl['variant']})")
    inside = data.groupby("system")["inside_slo"].sum()
    reason = (f"p90 TTFT and p90 TPOT both within scale x ({ttft:g} ms, {tpot:g} ms) at the preset's one load; "
              + ", ".join(f"{s}: {int(n)} of {int((data['system'] == s).sum())} configurations inside the SLO box"
                          for s, n in inside.items()))
    return Outcome(value, bool(ratio > 1), reason)


# ---------------------------------------------------------------------------------------------- Mooncake

def _capacity_gains(job: JobFolder, trace: str) -> pd.DataFrame:
    table = job.table()
    _need(table, "variant", "offered_rate_rps")
    gains = capacity_ratios(_capacity(lambda: capacity_table(job)))
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
        return Outcome(text, holds, "; ".join(x for x in (reason, note) if x))

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
    return Outcome("; ".join(texts), all(verdicts), "; ".join([reason, *notes]))


def _by_variant(job: JobFolder, column: str, variants: tuple[str, ...]) -> pd.Series:
    table = job.table()
    _need(table, "variant", column)
    values = table.groupby("variant")[column].first()
    missing = [v for v in variants if v not in values.index]
    if missing:
        raise MissingData(f"no variant {', '.join(missing)}")
    return values.loc[list(variants)].astype(float)


SCHEDULERS = ("random", "load_balancing", "local_cache_aware", "global_cache_aware")


def mooncake_scheduling_order(job: JobFolder) -> Outcome:
    ttft = _by_variant(job, "mean_ttft_ms", SCHEDULERS) / 1000.0
    holds = bool(np.all(np.diff(ttft.to_numpy()) < 0))
    value = " / ".join(f"{v:.2f}" for v in ttft) + " s"
    reason = "mean TTFT falls strictly in the paper's order" if holds else "mean TTFT is not in the paper's order"
    return Outcome(value, holds, reason)


def mooncake_global_vs_local(job: JobFolder) -> Outcome:
    ttft = _by_variant(job, "mean_ttft_ms", ("local_cache_aware", "global_cache_aware"))
    change = ttft["global_cache_aware"] / ttft["local_cache_aware"] - 1.0
    value = f"{change:+.1%} ({ttft['global_cache_aware'] / 1000:.2f} s vs {ttft['local_cache_aware'] / 1000:.2f} s)"
    holds = bool(change < 0)
    if not holds:
        reason = "global cache-aware is not faster than local cache-aware"
    elif change > -0.14:
        reason = "global is faster, by less than the paper's 14%"
    else:
        reason = "global is faster, by at least the paper's 14%"
    return Outcome(value, holds, reason)


def mooncake_hit_rate_global_local(job: JobFolder) -> Outcome:
    hits = _by_variant(job, "sim_prefix_hit_rate_tokens", ("local_cache_aware", "global_cache_aware"))
    ratio = hits["global_cache_aware"] / hits["local_cache_aware"]
    value = f"{ratio:.2f}x ({hits['global_cache_aware']:.1%} vs {hits['local_cache_aware']:.1%} of prompt tokens)"
    return Outcome(value, bool(ratio > 1), "prefix hits under the scheduling experiment's global vs local "
                                           "cache-aware routing (end to end, finite DRAM pool)")


HIT_RATE_TOLERANCE = 0.10


def mooncake_hit_rate(job: JobFolder) -> Outcome:
    hits = _by_variant(job, "sim_prefix_hit_rate_tokens", ("global_cache_aware",))
    ours = float(hits.iloc[0])
    gap = ours - 0.40
    holds = abs(gap) <= HIT_RATE_TOLERANCE
    pool = job.setting("engine.kv_pool.dram_tokens_per_node")
    pool_note = f"; the pool holds {pool:,} tokens of DRAM per node" if isinstance(pool, int) else ""
    return Outcome(f"{ours:.1%} ({gap * 100:+.1f} pp)", holds,
                   f"token hit rate of the global cache-aware run, within +-{HIT_RATE_TOLERANCE * 100:.0f} pp of the "
                   f"paper's cache ratio counts as holding{pool_note}")


def mooncake_rejection(job: JobFolder) -> Outcome:
    table = rejection_table(job.table())
    if "n_rejected" not in table:
        raise MissingData("study.csv has no column n_rejected")
    splits = ["8P8D"] if "8P8D" in set(table["split"]) else list(dict.fromkeys(table["split"]))
    parts, verdicts = [], []
    for split in dict.fromkeys(table["split"]):
        counts = table[table["split"] == split].groupby("mode")["n_rejected"].first()
        if not {"baseline", "early", "predictive"} <= set(counts.index):
            continue
        b, e, p = (int(counts[m]) for m in ("baseline", "early", "predictive"))
        parts.append(f"{split}: {b:,} / {e:,} / {p:,}")
        if split in splits:
            verdicts.append(b > e > p)
    if not verdicts:
        raise MissingData("no split has baseline, early and predictive variants")
    judged = ", ".join(splits)
    reason = f"judged on {judged}" + ("" if "8P8D" in splits else " (the job has no 8P8D split)")
    reason += "; baseline > early > predictive " + ("holds" if all(verdicts) else "does not hold")
    return Outcome("; ".join(parts), all(verdicts), reason)


# ---------------------------------------------------------------------------------------------- Splitwise

def _chosen(job: JobFolder, trace: str, budget: str, designs: tuple[str, ...]) -> pd.DataFrame:
    table = job.table()
    _need(table, "trace", "budget", "design", "chosen", "max_rate_rps")
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
        return Outcome(value, holds, reason)

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
    return Outcome(value, holds, reason)


# ---------------------------------------------------------------------------------------------- the claims

FAST25 = "Mooncake FAST'25"
ARXIV_MC = "Mooncake arXiv 2407.00079"
DISTSERVE = "DistServe OSDI'24"
SPLITWISE = "Splitwise ISCA'24"

CLAIMS: tuple[Claim, ...] = (
    Claim("distserve_goodput", DISTSERVE,
          "Disaggregation serves more requests per GPU than colocated vLLM within the chatbot SLO at 90% "
          "attainment (§6.2, Fig. 8 [P])",
          "2.0-4.6x the rate of vLLM (chatbot, OPT-13B/66B/175B)", "distserve_slo_attainment", distserve_goodput),
    Claim("distserve_placement", DISTSERVE,
          "The placement search for OPT-13B on one node of 4 A100s (TTFT 200 ms, TPOT 100 ms, 90%) picks "
          "prefill TP2 + decode TP1 (LLMServe/DistServe simdistserve/README.md [P])",
          "tp_prefill=2, tp_decode=1; 1.56 req/s/GPU (ShareGPT)", "distserve_placement", distserve_placement),
    Claim("distserve_tighter_slo", DISTSERVE,
          "At the same GPU count, disaggregation meets tighter latency SLOs than colocation "
          "(§6.2 [P]; our proxy: the tightest common TTFT/TPOT SLO scale a configuration meets at p90)",
          "1.8-3.2x tighter SLO than vLLM (chatbot)", "distserve_pareto", distserve_pareto),
    Claim("mooncake_capacity_100", FAST25,
          "Mooncake raises effective request capacity over vLLM on the conversation trace, TBT threshold I "
          "(100 ms) (Fig. 1 [S]; baseline variant per label unverified)",
          "+498%", "mooncake_capacity", mooncake_capacity_at(100)),
    Claim("mooncake_capacity_200", FAST25,
          "Same, TBT threshold II (200 ms) (Fig. 1 [S])", "+157%", "mooncake_capacity", mooncake_capacity_at(200)),
    Claim("mooncake_capacity_300", FAST25,
          "Same, TBT threshold III (300 ms) (Fig. 1 [S])", "+59%", "mooncake_capacity", mooncake_capacity_at(300)),
    Claim("mooncake_capacity_synthetic", FAST25,
          "Mooncake raises effective request capacity on the synthetic trace at every TBT threshold (Fig. 7 [S])",
          "+62% / +40% / +28% (100 / 200 / 300 ms)", "mooncake_capacity", mooncake_capacity_synthetic),
    Claim("mooncake_scheduling", FAST25,
          "Average TTFT falls from random to load-balancing to local cache-aware to global cache-aware "
          "scheduling (conversation trace, §4 / Fig. 5 [S])",
          "19.65 / 5.27 / 3.58 / 3.07 s", "mooncake_scheduling", mooncake_scheduling_order),
    Claim("mooncake_global_vs_local", FAST25,
          "Global cache-aware scheduling lowers average TTFT below local cache-aware (Fig. 5 text [S])",
          "-14%", "mooncake_scheduling", mooncake_global_vs_local),
    Claim("mooncake_hit_global_local", FAST25,
          "A cluster-wide (global) KV cache gives a higher hit rate than per-instance local caches (Fig. 10 [S])",
          "up to 2.36x the hit rate", "mooncake_scheduling", mooncake_hit_rate_global_local),
    Claim("mooncake_hit_rate", FAST25,
          "About 40% of the conversation trace's prompt tokens are reusable from the KV cache "
          "(cache ratio, Table 2 [S]; ours: hit rate reached in the global cache-aware run)",
          "40%", "mooncake_scheduling", mooncake_hit_rate),
    Claim("mooncake_rejection", ARXIV_MC,
          "Early rejection rejects fewer requests than per-stage rejection, and prediction-based early rejection "
          "fewer still (8P+8D, trace at 2x speed; §8.2, Table 3 [S])",
          "4,183 / 3,771 / 3,589 rejected (baseline / early / predictive)", "mooncake_rejection", mooncake_rejection),
    Claim("splitwise_aa_isopower", SPLITWISE,
          "Iso-power, conversation: Splitwise-AA out-serves Baseline-A100 (§6.2, Fig. 18a [P])",
          "2.15x throughput", "splitwise_provisioning", splitwise_vs("splitwise_aa", "baseline_a100", "power")),
    Claim("splitwise_ha_isopower", SPLITWISE,
          "Iso-power, conversation: Splitwise-HA out-serves Baseline-A100 at lower cost (§6.2, Fig. 18a [P])",
          "1.18x throughput at 10% lower cost", "splitwise_provisioning",
          splitwise_vs("splitwise_ha", "baseline_a100", "power", cheaper=True)),
    Claim("splitwise_aa_isocost", SPLITWISE,
          "Iso-cost, conversation: Splitwise-AA out-serves Baseline-H100 (§6.3, Fig. 18b [P])",
          "1.4x throughput (+25% power)", "splitwise_provisioning",
          splitwise_vs("splitwise_aa", "baseline_h100", "cost")),
    Claim("splitwise_pool_sizing", SPLITWISE,
          "Pool sizes follow the workload: coding (long prompts, few tokens) gets a larger share of prompt "
          "machines than conversation (iso-power Splitwise-HH, §6.2 [P])",
          "coding 35P/5T (88% prompt) vs conversation 25P/15T (62% prompt)", "splitwise_provisioning",
          splitwise_pool_sizing),
)
