"""DistServe (OSDI'24) claims: per-GPU goodput, the placement search, tighter SLOs."""

from __future__ import annotations

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
    pareto_table,
    slo_goodput_table,
)
from harness.result_files import PLACEMENT_FILE

DISTSERVE = "DistServe OSDI'24"


def distserve_goodput(job: JobFolder) -> Outcome:
    """DistServe's per-GPU goodput over vLLM's, on azure_conv when the job has it."""
    table = job.table()
    need_columns(table, "variant", "per_gpu_rate", "slo_attainment")
    goodput = capacity_or_missing(lambda: slo_goodput_table(job, str(job.setting("workload.name", ""))))
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
    return direction_outcome("; ".join(parts), holds, "; ".join(x for x in (reason, note) if x))


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
    return direction_outcome(value, holds, f"{reason}; rates differ with the workload ({workload}, not ShareGPT)")


def distserve_pareto(job: JobFolder) -> Outcome:
    """Tightest SLO scale each system meets (p90 TTFT and TPOT within scale x SLO), vLLM over DistServe."""
    table = job.table()
    need_columns(table, "variant", "p90_ttft_ms", "p90_tpot_ms", "slo_attainment")
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
    return direction_outcome(value, bool(ratio > 1), reason)



CLAIMS: tuple[Claim, ...] = (
    Claim("distserve_goodput", DISTSERVE,
          "Disaggregation serves more requests per GPU than colocated vLLM within the chatbot SLO at 90% "
          "attainment (§6.2, Fig. 8 [P])",
          "2.0-4.6x the rate of vLLM (chatbot, OPT-13B/66B/175B)", "distserve_slo_attainment", distserve_goodput,
          setup=Setup(paper="OPT-13B/66B/175B on A100 nodes, ShareGPT chatbot, per-GPU rate swept, TTFT/TPOT SLOs at 90% attainment; vLLM timed with its own profile",
          ours="OPT-13B simulated on A100-80GB with DistServe's profile, 4 GPUs per system, shared-prefix chat and Azure conversation traces",
          differences=("trace: not ShareGPT", "vLLM timed with DistServe's profile, not vLLM's", "one model size (13B)"))),
    Claim("distserve_placement", DISTSERVE,
          "The placement search for OPT-13B on one node of 4 A100s (TTFT 200 ms, TPOT 100 ms, 90%) picks "
          "prefill TP2 + decode TP1 (LLMServe/DistServe simdistserve/README.md [P])",
          "tp_prefill=2, tp_decode=1; 1.56 req/s/GPU (ShareGPT)", "distserve_placement", distserve_placement,
          setup=Setup(paper="simdistserve README: OPT-13B, 1 node x 4 A100, ShareGPT, TTFT 200 ms / TPOT 100 ms at 90%, N=300 per probe",
          ours="our placement search, same model, node and SLO, N=300, Azure conversation lengths",
          differences=("trace: Azure conversation, not ShareGPT", "layout equality judged, not per-GPU goodput"))),
    Claim("distserve_tighter_slo", DISTSERVE,
          "At the same GPU count, disaggregation meets tighter latency SLOs than colocation "
          "(§6.2 [P]; our proxy: the tightest common TTFT/TPOT SLO scale a configuration meets at p90)",
          "1.8-3.2x tighter SLO than vLLM (chatbot)", "distserve_pareto", distserve_pareto,
          setup=Setup(paper="artifact scripts: fixed per-GPU rate, DistServe P TP2 + D TP1 (3 GPUs) vs vLLM TP1 (1 GPU), SLO scale swept, joint per-request attainment, 90% crossing interpolated, ratio = vLLM scale / DistServe scale",
          ours="a Pareto proxy: the tightest common SLO scale met at p90 over P:D splits and batch limits at one load",
          differences=("metric: p90 box, not joint attainment", "GPU counts: 4 vs 4, not 3 vs 1"))),
)
