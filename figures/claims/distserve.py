"""DistServe (OSDI'24) claims, each judged on the paper's own metric as its artifact computes it: per-GPU
goodput on ShareGPT (Fig. 8 upper row), the tighter SLO it meets (Fig. 8 lower row: the SLO scale at which
joint attainment crosses 90%, vLLM's over DistServe's) and the placement its simulator's search picks
(simdistserve README), judged on per-GPU goodput and ties, not on layout equality alone.

Variants are ``<workload>/<system>``; the claims are judged on ``distserve_sharegpt`` (DistServe's own chatbot
requests, the lengths of its authors' A100 runs); other workload tags (``distserve_sharegpt@shipped_profile``,
``sharegpt``, ``sharegpt@n1000``, ``azure_conv`` ...) are reported beside it, and as the sensitivity finding when
a claim does not hold. The goodput claim also quotes the measured A100 runs (:mod:`figures.real_runs`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import pandas as pd

from figures.claims.base import (
    DIRECTION,
    FAILS,
    INCONCLUSIVE,
    MATCHES,
    Bounded,
    Claim,
    Experiment,
    MissingData,
    Outcome,
    Setup,
    capacity_or_missing,
    format_range,
    grade_range,
    need_columns,
    ratio_range,
)
from figures.real_runs import highest_rate_meeting, measured_attainment
from figures.study_tables import JobFolder, slo_goodput_table, split_label
from vocab.result_files import PLACEMENT_FILE, SLO_CROSSING_FILE

DISTSERVE = "DistServe OSDI'24"
JUDGED_WORKLOAD = "distserve_sharegpt"  # DistServe's chatbot workload: its own ShareGPT requests
GOODPUT_RANGE = (2.0, 4.6)  # §6.2: 2.0x-4.6x higher rate than vLLM, chatbot (OPT-13B/66B/175B)
TIGHTER_RANGE = (1.8, 3.2)  # §6.2: 1.8x-3.2x tighter SLO than vLLM, chatbot
TIGHTER_RATE = 1.5  # req/s per GPU of the OPT-13B run in _plot.py plot_fig8_lower
README_RATE = 1.56  # simdistserve/README.md: best per GPU rate for OPT-13B on 1 x 4 A100
README_LAYOUT = {"prefill_tp": 2, "prefill_pp": 1, "decode_tp": 1, "decode_pp": 1}
BAND = 0.25
SIZES_NOTE = ("a range the paper states over three model sizes (OPT-13B, 66B, 175B); ours is the 13B run only, "
              "and the paper gives no number for its 13B panel alone")


def _ratio_text(lo: float, hi: float) -> str:
    return format_range(lo, hi, lambda r: f"{r:.2f}x")


def _systems(frame: pd.DataFrame, column: str = "system") -> dict[str, pd.DataFrame]:
    return {str(s).lower(): part for s, part in frame.groupby(column, sort=False)}


# ---------------------------------------------------------------------------------------------- goodput

def goodput_ratios(job: JobFolder) -> dict[str, tuple[float, float, str]]:
    """Per workload with both systems: the range of DistServe's per-GPU goodput over vLLM's, and a label."""
    goodput = capacity_or_missing(lambda: slo_goodput_table(job, str(job.setting("workload.name", ""))))
    out: dict[str, tuple[float, float, str]] = {}
    for workload, group in goodput.groupby("workload", sort=False):
        systems = _systems(group)
        if "distserve" not in systems or "vllm" not in systems:
            continue
        a, b = (Bounded(float(x["goodput_rps_per_gpu"].iloc[0]), str(x["bound"].iloc[0]),
                        float(x["lowest_measured"].iloc[0]), str(x["label"].iloc[0]))
                for x in (systems["distserve"], systems["vllm"]))
        lo, hi = ratio_range(a, b)
        out[str(workload)] = (lo, hi, f"{workload}: {_ratio_text(lo, hi)} (DistServe {a} vs vLLM {b} req/s/GPU)")
    return out


def distserve_goodput(job: JobFolder) -> Outcome:
    """DistServe's per-GPU goodput over vLLM's at 90% joint attainment, judged on ShareGPT."""
    need_columns(job.table(), "variant", "per_gpu_rate", "slo_attainment")
    ratios = goodput_ratios(job)
    if JUDGED_WORKLOAD not in ratios:
        raise MissingData(f"no {JUDGED_WORKLOAD}/DistServe and {JUDGED_WORKLOAD}/vLLM variants (rerun the preset)")
    lo, hi, text = ratios[JUDGED_WORKLOAD]
    verdict = grade_range(lo, hi, *GOODPUT_RANGE)
    others = [t for w, (_, _, t) in ratios.items() if w != JUDGED_WORKLOAD]
    reason = (f"judged on {JUDGED_WORKLOAD}: highest per-GPU rate with >= 90% of requests meeting TTFT and TPOT, "
              f"interpolated between measured rates; matches within +-{BAND:.0%} of "
              f"{GOODPUT_RANGE[0]:g}-{GOODPUT_RANGE[1]:g}x, {SIZES_NOTE}")
    if verdict == INCONCLUSIVE:
        reason += "; the measured rates do not pin the ratio down (extend study.per_gpu_rates)"
    real = real_runs_text(job)
    if real:
        reason += f"; {real}"
    sensitivity = "; ".join(others) if verdict in (FAILS, INCONCLUSIVE) else ""
    value = "; ".join([text, *others]) if not sensitivity else text
    return Outcome(value, verdict, reason, sensitivity)


def real_runs_text(job: JobFolder) -> str:
    """What the DistServe authors' measured A100 runs say at the job's SLO: the highest measured per-GPU rate at
    which each system reached the attainment target (:mod:`figures.real_runs`); "" when the runs are absent."""
    ttft, tpot = job.setting("slo.ttft_ms"), job.setting("slo.tpot_ms")
    target = float(job.setting("slo.attainment_target", 0.9) or 0.9)
    if not ttft or not tpot:
        return ""
    data_dir = job.setting("data_dir")
    real = measured_attainment(float(ttft), float(tpot), str(data_dir) if data_dir else None)
    if real.empty:
        return ""
    parts = []
    for system in dict.fromkeys(real["system"]):
        best, lowest = highest_rate_meeting(real, system, target)
        part = real[real["system"] == system]
        at_lowest = float(part.loc[part["per_gpu_rate"] == lowest, "slo_attainment"].max())
        parts.append(f"{system} >= {target:.0%} up to {best:.3g} req/s/GPU" if best is not None else
                     f"{system} below {target:.0%} at every measured rate ({at_lowest:.0%} at {lowest:.3g} req/s/GPU)")
    return "the DistServe authors' measured runs (about 100 s of requests each): " + "; ".join(parts)


# ---------------------------------------------------------------------------------------------- tighter SLO

def _interval(row: pd.Series) -> tuple[float, float]:
    """The range a crossing scale can lie in (``slo_crossing.csv``'s bound)."""
    scale = float(row["crossing_scale"])
    if row["bound"] == "at_most":
        return 0.0, scale
    if row["bound"] == "above_range":
        return scale, math.inf
    return scale, scale


def _scale_ratio(ds: pd.Series, vl: pd.Series) -> tuple[float, float]:
    """The range of vLLM's crossing scale over DistServe's."""
    d_lo, d_hi = _interval(ds)
    v_lo, v_hi = _interval(vl)
    lo = v_lo / d_hi if d_hi > 0 else math.inf
    hi = v_hi / d_lo if d_lo > 0 else math.inf
    return lo, hi


def scale_ratios(crossings: pd.DataFrame) -> list[dict[str, Any]]:
    """Per workload tag and per-GPU rate with both systems: vLLM's crossing scale over DistServe's."""
    parts = [split_label(v) for v in crossings["variant"]]
    frame = crossings.assign(workload=[w for w, _ in parts], system=[s.lower() for _, s in parts])
    rows = []
    for (workload, rate), group in frame.groupby(["workload", "per_gpu_rate"], sort=False):
        systems = _systems(group)
        if "distserve" not in systems or "vllm" not in systems:
            continue
        ds, vl = systems["distserve"].iloc[0], systems["vllm"].iloc[0]
        lo, hi = _scale_ratio(ds, vl)
        rows.append({"workload": workload, "rate": float(rate), "lo": lo, "hi": hi,
                     "text": f"{workload} at {float(rate):g} req/s/GPU: {_ratio_text(lo, hi)} (crossing scale "
                             f"DistServe {ds['label']}, vLLM {vl['label']})"})
    return rows


def distserve_tighter_slo(job: JobFolder) -> Outcome:
    """vLLM's 90% crossing SLO scale over DistServe's at 1.5 req/s per GPU on ShareGPT (Fig. 8 lower row)."""
    if not job.has(SLO_CROSSING_FILE):
        raise MissingData(f"the job wrote no {SLO_CROSSING_FILE} (a study with study.slo_scales)")
    rows = scale_ratios(job.table(SLO_CROSSING_FILE))
    judged = [r for r in rows if r["workload"] == JUDGED_WORKLOAD and math.isclose(r["rate"], TIGHTER_RATE)]
    if not judged:
        raise MissingData(f"no {JUDGED_WORKLOAD}/DistServe and {JUDGED_WORKLOAD}/vLLM crossing at "
                          f"{TIGHTER_RATE:g} req/s per GPU")
    main = judged[0]
    verdict = grade_range(main["lo"], main["hi"], *TIGHTER_RANGE)
    others = [r["text"] for r in rows if r is not main]
    reason = (f"per-request joint attainment (TTFT and TPOT both within scale x (250 ms, 100 ms)) over scales "
              f"1.6 ... 0.4, the 90% crossing interpolated linearly as DistServe's _plot.py does; ratio = vLLM's "
              f"scale / DistServe's; matches within +-{BAND:.0%} of {TIGHTER_RANGE[0]:g}-{TIGHTER_RANGE[1]:g}x, "
              f"{SIZES_NOTE}")
    sensitivity = "; ".join(others) if verdict in (FAILS, INCONCLUSIVE) else ""
    value = main["text"] if sensitivity else "; ".join([main["text"], *others])
    return Outcome(value, verdict, reason, sensitivity)


# ---------------------------------------------------------------------------------------------- placement

def _layout(plan: dict[str, Any]) -> str:
    return (f"P TP{plan.get('prefill_tp')}PP{plan.get('prefill_pp', 1)} + D TP{plan.get('decode_tp')}"
            f"PP{plan.get('decode_pp', 1)}")


def _plans(plans: Iterable[dict[str, Any]]) -> str:
    return ", ".join(f"{_layout(p)} ({p.get('n_gpus')} GPUs)" for p in plans) or "none"


def _search_text(result: dict[str, Any]) -> str:
    chosen, readme = result.get("chosen") or {}, result.get("readme_pair") or {}
    rate = result.get("per_gpu_goodput_rps")
    readme_rate = readme.get("per_gpu_rate")
    ties = [p for p in result.get("tied") or [] if _layout(p) != _layout(chosen)]
    return (f"chosen {_layout(chosen) if chosen else 'none'} ({chosen.get('n_gpus', '?')} GPUs) at "
            f"{'n/a' if rate is None else f'{rate:.3g}'} req/s/GPU, tied with it: {_plans(ties)}; "
            f"README pair P TP2 + D TP1: {'not searched' if readme_rate is None else f'{readme_rate:.3g} req/s/GPU'}"
            f"{' (tied with the best)' if readme.get('tied_with_best') else ''}")


def distserve_placement(job: JobFolder) -> Outcome:
    """The simdistserve-style search's per-GPU goodput of the README's pair, against the best pair's and
    the README's 1.56 req/s per GPU."""
    if not job.has(PLACEMENT_FILE):
        raise MissingData(f"the job wrote no {PLACEMENT_FILE}")
    report = job.json(PLACEMENT_FILE)
    if report.get("method") != "simdistserve" or "readme_pair" not in report:
        raise MissingData("the job did not run the README's search (study.params.method=simdistserve)")
    readme = report["readme_pair"]
    rate = readme.get("per_gpu_rate")
    if rate is None:
        raise MissingData("the search did not evaluate the README's pair (prefill TP2 + decode TP1)")
    tied = bool(readme.get("tied_with_best"))
    in_band = README_RATE * (1 - BAND) <= rate <= README_RATE * (1 + BAND)
    verdict = MATCHES if tied and in_band else (DIRECTION if tied else FAILS)
    workload = report.get("workload") or {}
    reason = (f"holds when the README's pair reaches the best per-GPU goodput of the search (chosen or tied); "
              f"matches when its goodput is also within +-{BAND:.0%} of {README_RATE:g} req/s/GPU "
              f"(simdistserve's bisection grid: 1.56 = 1.5625); {workload.get('name', '?')}, "
              f"N={workload.get('n_requests', '?')} per probe, iteration overhead "
              f"{report.get('iteration_overhead', '?')}")
    runs = report.get("sensitivity") or {}
    sensitivity = "; ".join(f"{name} ({', '.join(f'{k}={v}' for k, v in (r.get('changes') or {}).items())}): "
                            f"{_search_text(r)}" for name, r in runs.items())
    if verdict == FAILS:
        flipped = any((r.get("readme_pair") or {}).get("tied_with_best") for r in runs.values())
        if runs and not flipped:
            sensitivity += ("; no sensitivity run flips the choice (docs/placement.md lists what still differs from "
                            "the README's run: the request set, pipeline pairs, simdistserve's decode iterations)")
    return Outcome(_search_text(report), verdict, reason, sensitivity)


# ---------------------------------------------------------------------------------------------- setups

LENGTHS = ("requests: DistServe's own (workload distserve_sharegpt: the 1,600 requests of the DistServe authors' "
           "A100 runs, prompt mean 759, output mean 186 tokens)")
CORRECTION = ("each profile with the correction fitted on DistServe's real A100 runs (experiment "
              "distserve_real_replay: vLLM prefill x0.87, +2 ms/step, +0.25 ms/sequence; DistServe prefill x1.02, "
              "+3 ms/step); DistServe's prefill keeps a KV until decode has room (kv_handoff=pull)")

GOODPUT_SETUP = Setup(
    paper="real A100 runs (artifact opt-13b scripts): ShareGPT (OPT tokenizer, prompt + output < 2048), "
          "100 requests per GPU per rate, Poisson, per-GPU rates 0.25-3; DistServe prefill TP2 + decode "
          "TP1 (3 GPUs) vs vLLM TP1 (1 GPU, no chunked prefill, 16384 batched tokens, 1024 seqs); "
          "TTFT 250 ms / TPOT 100 ms, joint attainment, 90% crossing interpolated",
    ours=f"simulated OPT-13B with DistServe's fitted A100 profiles (vLLM's profile for vLLM), {CORRECTION}; the "
         f"same deployments, batch limits, SLO and rates (plus 0.1, 0.15, 4, 5, 6, 8); {LENGTHS}, all 1,600 at each "
         "rate. Drawn beside ours: the DistServe authors' measured runs (hollow black markers); also 4-GPU "
         "deployments of all four systems on shared_prefix_chat and azure_conv",
    differences=("1,600 requests per deployment and rate, not the artifact's 100 per GPU: in a 100-request sample "
                 "the few prompts whose vLLM prefill alone exceeds 250 ms decide whether vLLM ever reaches 90% "
                 "(5.3% of all 1,600 with the corrected profile; 100 per GPU is the @n100 sensitivity run)",
                 "simulated, not measured: no scheduling or Ray overhead beyond the fitted per-step cost, KV "
                 "transfer on a modelled NVLink",
                 "the measured runs drawn beside ours issue about 100 s of requests (N = 100 x rate)",
                 "sensitivity: the shipped profiles (no correction), Sarathi-Serve's ShareGPT lengths (outputs twice "
                 "as long; also with 1,000 requests per GPU)",
                 "one model size (13B) of the three"))

PLACEMENT_SETUP = Setup(
    paper="simdistserve README: OPT-13B, 1 node x 4 A100, ShareGPT, every prefill + decode pair in the "
          "node (PP included), N=300 per probe, per-GPU rate bisected on [0, 5] to 0.25, P90 TTFT < 200 "
          "ms and P90 TPOT < 100 ms checked separately, TPOT = decode time / output length, whole-prompt "
          "prefill batches, 2 ms + 1e-4 ms/token per iteration",
    ours="the same search on our simulator (study.params.method=simdistserve): the same model, "
         f"profiles (uncorrected, as simdistserve's), SLO, N, bisection, checks, TPOT rule and per-iteration "
         f"overhead; {LENGTHS}",
    differences=("pipeline-parallel pairs skipped (our prefill instance runs a pipeline as one server); "
                 "simdistserve also searched them",
                 "ties and the README pair's goodput judged, not layout equality alone",
                 "sensitivity: Sarathi-Serve's ShareGPT lengths (outputs twice as long) and no decode KV limit"))

TIGHTER_SETUP = Setup(
    paper="artifact (_plot.py plot_fig8_lower, OPT-13B): one run per system at 1.5 req/s per GPU, "
          "100 requests per GPU, DistServe prefill TP2 + decode TP1 (3 GPUs) vs vLLM TP1 (1 GPU), "
          "ShareGPT, TTFT 250 ms and TPOT 100 ms both scaled by 1.6 ... 0.4, per-request joint "
          "attainment, 90% crossing by linear interpolation, ratio = vLLM's scale / DistServe's",
    ours="the same rate, deployments, batch limits, scales, metric and interpolation, simulated with "
         f"DistServe's fitted profiles (vLLM's for vLLM), {CORRECTION}; {LENGTHS}, all 1,600 per run; also 1.0 and "
         "1.25 req/s per GPU",
    differences=("simulated, not measured",
                 "1,600 requests per run, not the artifact's 100 per GPU (the @n100 sensitivity run)",
                 "sensitivity: the shipped profiles, Sarathi-Serve's ShareGPT lengths (also with 1,000 requests per "
                 "GPU), and the Azure conversation lengths",
                 "one model size (13B) of the three"))

EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment("distserve_slo_attainment", "DistServe OSDI'24 per-GPU goodput (Fig. 8 upper row)", GOODPUT_SETUP),
    Experiment("distserve_placement", "DistServe OSDI'24 placement search (simdistserve README)", PLACEMENT_SETUP),
    Experiment("distserve_tighter_slo", "DistServe OSDI'24 tighter SLO (Fig. 8 lower row)", TIGHTER_SETUP),
)

CLAIMS: tuple[Claim, ...] = (
    Claim("distserve_goodput", DISTSERVE,
          "Disaggregation serves more requests per GPU than colocated vLLM within the chatbot SLO at 90% "
          "attainment (§6.2, Fig. 8 [P])",
          "2.0-4.6x the rate of vLLM (chatbot, OPT-13B/66B/175B)", "distserve_slo_attainment", distserve_goodput,
          figures=("slo_attainment", "slo_goodput"), title="DistServe per-GPU goodput vs vLLM"),
    Claim("distserve_placement", DISTSERVE,
          "The placement search for OPT-13B on one node of 4 A100s (TTFT 200 ms, TPOT 100 ms, 90%) picks "
          "prefill TP2 + decode TP1 (LLMServe/DistServe simdistserve/README.md [P])",
          "tp_prefill=2, tp_decode=1; 1.56 req/s/GPU (ShareGPT)", "distserve_placement", distserve_placement,
          figures=("placement_pairs",), title="DistServe placement search picks P TP2 + D TP1"),
    Claim("distserve_tighter_slo", DISTSERVE,
          "At the same per-GPU rate, disaggregation meets tighter latency SLOs than colocation (§6.2, Fig. 8 "
          "lower row [P]; measured as the artifact's _plot.py does)",
          "1.8-3.2x tighter SLO than vLLM (chatbot)", "distserve_tighter_slo", distserve_tighter_slo,
          figures=("slo_scale",), title="DistServe tighter SLO than vLLM"),
)
