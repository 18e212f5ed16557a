"""``job=sim_study study.kind=placement_search``: DistServe's placement search (OSDI'24, Algorithm 1, high
node affinity) for the configured model, hardware, workload and SLO; the algorithm is
:mod:`harness.studies.placement_algorithm`. ``study.params.method=simdistserve`` runs instead the search of
DistServe's own simulator (its README example): one prefill + one decode instance per configuration, the
per-GPU rate bisected on a fixed grid, P90 TTFT and P90 TPOT checked separately
(:mod:`harness.studies.placement_pairs`; ``docs/placement.md`` sets the two side by side).

Each phase is sized on one simulated instance (prefill against ``slo.ttft_ms``, decode against
``slo.tpot_ms``, both at ``slo.attainment_target``) on the first ``study.max_requests`` requests of the
workload (default 300) with Poisson arrivals; the best layouts are balanced into a P:D plan within the
node budget and, by default, the plan's end-to-end max rate is found with full P/D simulations.

``study.params`` (all optional):

- ``method`` (``alg1``): ``alg1`` (Algorithm 1, below) | ``simdistserve`` (the pair search; it reads
  ``gpus_per_node``, ``pipeline_parallel``, ``even_pipeline_stages`` and its own ``max_per_gpu_rate`` (5),
  ``esp`` (0.25), ``tpot_rule`` (``simdistserve``: decode time / output length; ``suite``: / (output - 1)),
  ``decode_kv_limit`` (``profile``: the layout's KV capacity; ``none``: unlimited, as simdistserve's decode
  worker) and ``sensitivity`` (``{name: {param: value}}``: the search rerun with those params changed, each
  result under ``placement.json``'s ``sensitivity``; the key ``workload`` names a ``conf/workload`` config whose
  requests that run searches on, e.g. ``workload: sharegpt``);
- ``gpus_per_node`` (4), ``nodes`` (1): the GPU budget; ``tp <= gpus_per_node``, ``tp * pp <= both``;
- ``target_rate_rps`` (null): also replicate the best layouts to serve this rate;
- ``verify`` (``bisect``): ``bisect`` | ``point`` (attainment at the plan's rate) | ``none``;
- ``objective`` (``per_gpu``): the P:D plan maximises the rate per GPU (``per_gpu``, DistServe's goodput
  measure) or the rate served within the budget (``rate``);
- ``growth`` (2.0), ``rel_tol`` (0.01), ``max_bisect_steps`` (8), ``hint_scale`` (0.8), ``max_rate_rps``
  (1e4): the rate search (:func:`harness.capacity.search_max_rate`, geometric);
- ``throughput_bound`` (true): cap each phase's rate at its analytic throughput bound
  (``PlacementSimulator.throughput_bound``; a few hundred requests cannot saturate a large decode instance);
- ``pipeline_parallel`` (false): search ``pp > 1`` too. Off by default because the simulator runs an
  instance as one server whose iteration takes the performance model's per-stage time (``time / pp``):
  that is a pipeline's throughput but not its latency (a request crosses all ``pp`` stages, as
  DistServe's simulator models with one worker per stage), so TTFT and TPOT would be understated about
  ``pp``-fold and pipelined layouts would win for the wrong reason;
- ``even_pipeline_stages`` (true): with ``pipeline_parallel``, skip ``pp`` that does not divide the
  model's layers (the fitted models assume equal stages);
- ``parallel`` (``auto``), ``parallel_workers`` (null): where the independent searches run, one task per
  phase and layout (``alg1``) or per pair (``simdistserve``): ``auto`` follows the configured Hydra
  launcher (joblib processes, Ray tasks, submitit jobs; in-process under the basic launcher), or
  ``none | joblib | ray | slurm | submitit_local`` (:mod:`harness.probe_pool`, ``docs/parallel_probes.md``).
  The results are the same wherever they run (only wall times differ); ``placement.json``'s ``params``
  leave these two out.

Writes ``study.csv`` (one row per phase and layout: rate, rate per GPU, attainment at that rate,
simulations run; skipped layouts with their reason) and ``placement.json`` (the chosen configuration,
goodput per GPU, replication plan, end-to-end check, wall time). With ``method=simdistserve``, one
``study.csv`` row per pair and ``placement.json`` with the chosen pair, every pair tied with it, the README's
pair and every probe (:mod:`harness.studies.placement_pairs_report`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd

from harness.config import Config
from harness.jobs import JobResult
from harness.probe_pool import Pool, check_parallel, probe_pool
from harness.results import RunFolder
from harness.studies.placement_algorithm import (
    OBJECTIVES,
    Parallelism,
    PhaseResult,
    PlacementResult,
    PlacementSimulator,
    ReplicaPlan,
    SearchSettings,
    search_placement,
)
from harness.studies.placement_pairs import (
    DECODE_KV_LIMITS,
    TPOT_RULES,
    PairSearchResult,
    PairSettings,
    search_pairs,
)
from harness.studies.placement_pairs_report import pair_report, pair_table
from harness.studies.simulate import load_requests, point_workload
from harness.studies.variants import compose_variant
from systems.sim.deployment_setup import DeploymentSetup, PoolSetup
from systems.sim.perf.base import InstanceShape, PerfModel
from systems.sim.perf.registry import build_perf_model
from systems.sim.simulated_deployment import build_setup, peer_timing_params, perf_model_params
from systems.topology import topology_of
from vocab.errors import ConfigError
from vocab.result_files import PLACEMENT_FILE, STUDY_FILE

log = logging.getLogger(__name__)

DEFAULT_REQUESTS = 300
DEFAULT_PARAMS: dict[str, Any] = {
    "gpus_per_node": 4, "nodes": 1, "target_rate_rps": None, "verify": "bisect", "objective": "per_gpu",
    "growth": 2.0, "rel_tol": 0.01, "max_bisect_steps": 8, "hint_scale": 0.8, "max_rate_rps": 1e4,
    "throughput_bound": True, "pipeline_parallel": False, "even_pipeline_stages": True,
    "method": "alg1", "max_per_gpu_rate": 5.0, "esp": 0.25, "tpot_rule": "simdistserve",
    "decode_kv_limit": "profile", "sensitivity": {}, "parallel": "auto", "parallel_workers": None,
}
PARALLEL_PARAMS = ("parallel", "parallel_workers")  # where the searches run, not what they compute
METHODS = ("alg1", "simdistserve")
PP_REASON = ("pp={pp}: the simulator runs an instance as one server at the per-stage time (time / pp), "
             "which understates a pipeline's latency ~pp-fold (study.params.pipeline_parallel=true searches it anyway)")
# LLMServe/DistServe simdistserve/README.md: the same search for OPT-13B, 1 node x 4 A100, TTFT 200 ms,
# TPOT 100 ms at 90%, on ShareGPT (N=300); it reports no run time.
DISTSERVE_README = {"workload": "sharegpt", "per_gpu_rate": 1.56, "prefill_tp": 2, "prefill_pp": 1,
                    "decode_tp": 1, "decode_pp": 1, "n_gpus": 3}


def placement_params(study: Any) -> dict[str, Any]:
    """``study.params`` over the defaults; ``ConfigError`` naming an unknown or invalid key."""
    given = dict(study.params or {})
    unknown = sorted(set(given) - set(DEFAULT_PARAMS))
    if unknown:
        raise ConfigError(f"study.params.{unknown[0]}: unknown key for study.kind=placement_search; "
                          f"known: {', '.join(DEFAULT_PARAMS)}")
    params = {**DEFAULT_PARAMS, **given}
    for key in ("gpus_per_node", "nodes", "max_bisect_steps"):
        value = params[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"study.params.{key}: must be an integer >= 1, got {value!r}")
    for key in ("growth", "rel_tol", "hint_scale", "max_rate_rps", "max_per_gpu_rate", "esp"):
        if not isinstance(params[key], int | float) or not params[key] > 0:
            raise ConfigError(f"study.params.{key}: must be a number > 0, got {params[key]!r}")
    if params["growth"] <= 1:
        raise ConfigError(f"study.params.growth: must be > 1, got {params['growth']}")
    target = params["target_rate_rps"]
    if target is not None and (not isinstance(target, int | float) or not target > 0):
        raise ConfigError(f"study.params.target_rate_rps: must be a number > 0 or null, got {target!r}")
    if params["verify"] not in ("bisect", "point", "none"):
        raise ConfigError(f"study.params.verify: expected bisect, point or none, got {params['verify']!r}")
    for key in ("throughput_bound", "pipeline_parallel", "even_pipeline_stages"):
        if not isinstance(params[key], bool):
            raise ConfigError(f"study.params.{key}: must be true or false, got {params[key]!r}")
    if params["objective"] not in OBJECTIVES:
        raise ConfigError(f"study.params.objective: expected one of {', '.join(OBJECTIVES)}, got {params['objective']!r}")
    if params["method"] not in METHODS:
        raise ConfigError(f"study.params.method: expected one of {', '.join(METHODS)}, got {params['method']!r}")
    if params["tpot_rule"] not in TPOT_RULES:
        raise ConfigError(f"study.params.tpot_rule: expected one of {', '.join(TPOT_RULES)}, got {params['tpot_rule']!r}")
    if params["method"] == "simdistserve" and params["nodes"] != 1:
        raise ConfigError(f"study.params.nodes: method=simdistserve searches one node, as DistServe's README "
                          f"example does; got {params['nodes']}")
    if params["decode_kv_limit"] not in DECODE_KV_LIMITS:
        raise ConfigError(f"study.params.decode_kv_limit: expected one of {', '.join(DECODE_KV_LIMITS)}, "
                          f"got {params['decode_kv_limit']!r}")
    check_parallel(params["parallel"], params["parallel_workers"])
    _check_sensitivity(params)
    return params


SENSITIVITY_WORKLOAD = "workload"  # a sensitivity run's workload: a conf/workload name (e.g. sharegpt)


def workload_config(name: str) -> Any:
    """The workload config of ``conf/workload/<name>.yaml`` (``ConfigError`` naming it when there is none)."""
    return compose_variant([f"workload={name}"]).workload


def _check_sensitivity(params: dict[str, Any]) -> None:
    """Each ``study.params.sensitivity.<name>`` is a mapping of other pair-search params."""
    runs = params["sensitivity"]
    if not isinstance(runs, dict):
        raise ConfigError(f"study.params.sensitivity: must be a mapping of name -> params, got {runs!r}")
    if runs and params["method"] != "simdistserve":
        raise ConfigError("study.params.sensitivity: only method=simdistserve reruns its search")
    for name, changes in runs.items():
        if not isinstance(changes, dict) or not changes:
            raise ConfigError(f"study.params.sensitivity.{name}: must be a non-empty mapping of params, got {changes!r}")
        bad = sorted(set(changes) & {"method", "sensitivity", "gpus_per_node", "nodes", *PARALLEL_PARAMS}) or \
            sorted(set(changes) - set(DEFAULT_PARAMS) - {SENSITIVITY_WORKLOAD})
        if bad:
            raise ConfigError(f"study.params.sensitivity.{name}.{bad[0]}: not a param a sensitivity run can change")
        workload = changes.get(SENSITIVITY_WORKLOAD, "")
        if not isinstance(workload, str):
            raise ConfigError(f"study.params.sensitivity.{name}.{SENSITIVITY_WORKLOAD}: must be the name of a "
                              f"conf/workload config (e.g. sharegpt), got {workload!r}")
        search_changes = {k: v for k, v in changes.items() if k != SENSITIVITY_WORKLOAD}
        placement_params(_Params({**{k: v for k, v in params.items() if k != "sensitivity"}, **search_changes}))


class _Params:
    """A stand-in study holding only ``params`` (to validate a sensitivity run's params)."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params


def _check(cfg: Config) -> None:
    study = cfg.study
    if cfg.engine.name != "sim":
        raise ConfigError(f"engine: the placement search runs engine=sim, got engine={cfg.engine.name}")
    if not topology_of(cfg.system.name).disaggregated:
        raise ConfigError(f"system={cfg.system.name}: the placement search sizes a disaggregated deployment; "
                          "use system=distserve")
    if study.variants or study.rates_rps or study.per_gpu_rates or study.speedups:
        raise ConfigError("study: placement_search finds its own rates and takes no variants, rates_rps, "
                          "per_gpu_rates or speedups")
    for key in ("ttft_ms", "tpot_ms"):
        if cfg.slo.bounds.get(key) is None:
            raise ConfigError(f"slo.{key}: the placement search needs a {key[:4].upper()} bound (slo={cfg.slo.name})")


@dataclass(frozen=True)
class PerfFor:
    """The performance model of an instance shape under ``cfg`` (picklable: probe-pool workers get it)."""

    cfg: Config

    def __call__(self, shape: InstanceShape) -> PerfModel:
        cfg = self.cfg
        return build_perf_model(cfg.engine.perf_model, cfg.model, cfg.hardware, shape,
                                profiles_dir=cfg.engine.profiles_dir,
                                gpu_memory_utilization=cfg.engine.gpu_memory_utilization, **perf_model_params(cfg),
                                **peer_timing_params(cfg))


@dataclass(frozen=True)
class MakeSetup:
    """A fresh ``DeploymentSetup`` of ``cfg`` with the given pools (picklable: probe-pool workers get it)."""

    cfg: Config

    def __call__(self, pools: tuple[PoolSetup, ...]) -> DeploymentSetup:
        return dataclasses.replace(build_setup(self.cfg, [], {}, seed=self.cfg.seed), pools=pools)


def build_simulator(cfg: Config) -> tuple[PlacementSimulator, dict[str, Any]]:
    """The search's simulator for ``cfg`` (requests loaded once at 1 req/s, capped to the model's context)
    and the statistics of those requests."""
    n = cfg.study.max_requests or DEFAULT_REQUESTS
    requests = load_requests(cfg, point_workload(cfg, rate_rps=1.0, max_requests=n))
    sim = PlacementSimulator(requests.specs, cfg.hardware, PerfFor(cfg), MakeSetup(cfg), cfg.slo.ttft_ms / 1e3,
                             cfg.slo.tpot_ms / 1e3)
    inputs = np.array([s.input_length for s in requests.specs])
    outputs = np.array([s.output_length for s in requests.specs])
    workload = {"name": cfg.workload.name, "n_requests": len(requests.specs),
                "context_cap_tokens": cfg.model.max_model_len if cfg.engine.cap_to_context else None,
                "input_len_mean": float(inputs.mean()), "input_len_median": float(np.median(inputs)),
                "input_len_max": int(inputs.max()), "output_len_mean": float(outputs.mean()),
                "output_len_median": float(np.median(outputs)), "output_len_max": int(outputs.max()),
                "arrivals": "poisson", "arrival_seed": requests.stats.get("arrival_seed")}
    return sim, workload


def layout_filter(cfg: Config, params: dict[str, Any]) -> Callable[[Parallelism], Optional[str]]:
    """Why a layout is left out of the search (None: searched): pipelines unless ``pipeline_parallel``,
    uneven pipeline stages with ``even_pipeline_stages``."""
    layers = cfg.model.num_layers

    def unsupported(par: Parallelism) -> Optional[str]:
        if par.pp > 1 and not params["pipeline_parallel"]:
            return PP_REASON.format(pp=par.pp)
        if params["even_pipeline_stages"] and layers % par.pp:
            return f"pp={par.pp} does not divide the {layers} layers of {cfg.model.name} (even_pipeline_stages)"
        return None

    return unsupported


def plan_pairs(cfg: Config, params: dict[str, Any], sim: PlacementSimulator,
               pool: Optional[Pool] = None) -> PairSearchResult:
    """simdistserve's pair search for ``cfg`` (``method=simdistserve``), its pairs through ``pool``."""
    settings = PairSettings(max_per_gpu_rate=float(params["max_per_gpu_rate"]), esp=float(params["esp"]),
                            quantile=cfg.slo.attainment_target, tpot_rule=params["tpot_rule"],
                            decode_kv_limit=params["decode_kv_limit"])
    return search_pairs(sim, params["gpus_per_node"], settings, layout_filter(cfg, params), pool)


def plan_placement(cfg: Config, pool: Optional[Pool] = None) -> tuple[PlacementResult, dict[str, Any], dict[str, Any]]:
    """Run Algorithm 1 for ``cfg``, its per-layout searches through ``pool``: (result, params, workload
    statistics)."""
    _check(cfg)
    params = placement_params(cfg.study)
    sim, workload = build_simulator(cfg)
    unsupported = layout_filter(cfg, params)
    settings = SearchSettings(target=cfg.slo.attainment_target, growth=float(params["growth"]),
                              rel_tol=float(params["rel_tol"]), max_steps=params["max_bisect_steps"],
                              hint_scale=float(params["hint_scale"]), max_rate_rps=float(params["max_rate_rps"]),
                              max_seqs=cfg.engine.max_num_seqs,
                              max_batched_tokens=cfg.engine.max_num_batched_tokens,
                              throughput_bound=params["throughput_bound"])
    result = search_placement(sim, params["gpus_per_node"], params["nodes"], settings, unsupported,
                              params["target_rate_rps"], params["verify"], params["objective"], pool)
    return result, params, workload


def candidate_table(result: PlacementResult) -> pd.DataFrame:
    """One row per phase and layout, searched or skipped."""
    chosen = {("prefill", result.plan.prefill), ("decode", result.plan.decode)} if result.plan else set()
    rows: list[dict[str, Any]] = []
    for c in result.candidates:
        rows.append({"phase": c.phase, "tp": c.parallelism.tp, "pp": c.parallelism.pp, "gpus": c.parallelism.n_gpus,
                     "status": "searched" if c.n_sims else "infeasible", "max_rate_rps": c.max_rate_rps,
                     "per_gpu_rate": c.per_gpu_rate, "attainment": c.attainment,
                     "upper_rate_rps": c.search.upper_rps, "bound_rps": c.bound_rps, "sims": c.n_sims,
                     "chosen": (c.phase, c.parallelism) in chosen, "note": c.note})
    for phase, par, reason in result.skipped:
        rows.append({"phase": phase, "tp": par.tp, "pp": par.pp, "gpus": par.n_gpus, "status": "skipped",
                     "max_rate_rps": math.nan, "per_gpu_rate": math.nan, "attainment": math.nan,
                     "upper_rate_rps": math.nan, "bound_rps": math.nan, "sims": 0, "chosen": False,
                     "note": reason})
    table = pd.DataFrame(rows)
    return table.sort_values(["phase", "tp", "pp"], key=lambda s: s.map({"prefill": 0, "decode": 1})
                             if s.name == "phase" else s, ignore_index=True)


def _phase(c: Optional[PhaseResult]) -> Optional[dict[str, Any]]:
    if c is None:
        return None
    return {"tp": c.parallelism.tp, "pp": c.parallelism.pp, "gpus": c.parallelism.n_gpus,
            "max_rate_rps": c.max_rate_rps, "per_gpu_rate": c.per_gpu_rate, "attainment": c.attainment}


def _plan(plan: Optional[ReplicaPlan]) -> Optional[dict[str, Any]]:
    return plan.describe() if plan is not None else None


def placement_report(cfg: Config, result: PlacementResult, params: dict[str, Any], workload: dict[str, Any]) -> dict[str, Any]:
    """What ``placement.json`` holds."""
    verification = None
    v = result.verification
    if v is not None:
        verification = {"plan_rate_rps": v.plan_rate_rps, "attainment_at_plan_rate": v.attainment_at_plan_rate,
                        "max_rate_rps": v.max_rate_rps,
                        "per_gpu_rate": v.max_rate_rps / result.plan.n_gpus if result.plan else None,
                        "sims": v.search.n_evals if v.search else 1,
                        "evaluations": [list(e) for e in v.search.evaluations] if v.search else None}
    return {
        **report_header(cfg, params, workload),
        "algorithm": "DistServe Alg. 1 (high node affinity)", "gpu_budget": result.gpu_budget,
        "objective": result.objective,
        "chosen": _plan(result.plan),
        "alg1_plan": _plan(result.alg1_plan),
        "per_gpu_goodput_rps": result.plan.per_gpu_rate if result.plan else None,
        "ideal_per_gpu_goodput_rps": result.ideal_per_gpu_rate,
        "best_prefill": _phase(result.best_prefill), "best_decode": _phase(result.best_decode),
        "verification": verification,
        "replication": dataclasses.asdict(result.replication) if result.replication else None,
        "n_simulations": result.n_sims, "search_wall_s": result.wall_s, "phase_wall_s": result.phase_wall_s,
    }


def report_header(cfg: Config, params: dict[str, Any], workload: dict[str, Any]) -> dict[str, Any]:
    """The ``placement.json`` fields every method writes: what was searched, for what, with what."""
    engine = cfg.engine
    return {"method": params["method"], "model": cfg.model.name, "hardware": cfg.hardware.name,
            "perf_model": engine.perf_model, "iteration_overhead": getattr(engine, "iteration_overhead", "none"),
            "max_num_batched_tokens": engine.max_num_batched_tokens, "max_num_seqs": engine.max_num_seqs,
            "gpus_per_node": params["gpus_per_node"], "nodes": params["nodes"],
            "slo": {"name": cfg.slo.name, "ttft_ms": cfg.slo.ttft_ms, "tpot_ms": cfg.slo.tpot_ms,
                    "attainment_target": cfg.slo.attainment_target},
            "workload": workload, "params": {k: v for k, v in params.items() if k not in PARALLEL_PARAMS},
            "reference_distserve_readme": DISTSERVE_README}


def summary_metrics(cfg: Config, report: dict[str, Any]) -> dict[str, Any]:
    """The flat metrics the job returns."""
    chosen = report["chosen"] or {}
    ver = report["verification"] or {}
    rep = report["replication"] or {}
    return {"study": cfg.study.kind, "figure": cfg.study.figure,
            **{k: chosen.get(k) for k in ("prefill_tp", "prefill_pp", "n_prefill", "decode_tp", "decode_pp",
                                          "n_decode", "n_gpus", "rate_rps")},
            "per_gpu_goodput_rps": report["per_gpu_goodput_rps"],
            "ideal_per_gpu_goodput_rps": report["ideal_per_gpu_goodput_rps"],
            "verified_max_rate_rps": ver.get("max_rate_rps"), "verified_per_gpu_goodput_rps": ver.get("per_gpu_rate"),
            "attainment_at_plan_rate": ver.get("attainment_at_plan_rate"),
            "replication_n_prefill": rep.get("n_prefill"), "replication_n_decode": rep.get("n_decode"),
            "replication_n_gpus": rep.get("n_gpus"),
            "n_simulations": report["n_simulations"], "search_wall_s": report["search_wall_s"],
            "total_wall_s": report["total_wall_s"]}


def _pool(cfg: Config, params: dict[str, Any], folder: RunFolder) -> AbstractContextManager[Pool]:
    """The probe pool ``study.params.parallel`` asks for (submitit's job files under ``folder``); ``auto`` without a
    launcher stays in this process: the search's few seconds of probes are shorter than starting joblib's workers
    (``python -m benchmarks.probe_pool_bench --experiment distserve_placement``: 3.6 s in-process, 4.9 s pooled)."""
    return probe_pool(params["parallel"], params["parallel_workers"], Path(folder.path), progress=cfg.engine.progress,
                      local_pool=False)


def run_pair_search(cfg: Config, folder: RunFolder) -> JobResult:
    """``method=simdistserve``: the pair search, then ``study.csv`` and ``placement.json`` in ``folder``."""
    start = time.perf_counter()
    _check(cfg)
    params = placement_params(cfg.study)
    with _pool(cfg, params, folder) as pool:
        sim, workload = build_simulator(cfg)
        search = plan_pairs(cfg, params, sim, pool)
        reruns = {}
        for name, changes in params["sensitivity"].items():
            search_changes = {k: v for k, v in changes.items() if k != SENSITIVITY_WORKLOAD}
            if changes.get(SENSITIVITY_WORKLOAD):  # the same search on another workload's requests
                vcfg = dataclasses.replace(cfg, workload=workload_config(changes[SENSITIVITY_WORKLOAD]))
                reruns[name] = plan_pairs(vcfg, {**params, **search_changes}, build_simulator(vcfg)[0], pool)
            else:
                reruns[name] = plan_pairs(cfg, {**params, **search_changes}, sim, pool)
    table = pair_table(search)
    report = {**report_header(cfg, params, workload), **pair_report(search)}
    sensitivity = {}
    for name, changes in params["sensitivity"].items():
        rerun = pair_report(reruns[name])
        sensitivity[name] = {"changes": dict(changes), **{k: rerun[k] for k in (
            "chosen", "per_gpu_goodput_rps", "tied", "readme_pair", "n_simulations", "search_wall_s")}}
        log.info("sensitivity %s (%s): %s at %s req/s per GPU; README pair %s", name, changes, rerun["chosen"],
                 rerun["per_gpu_goodput_rps"], rerun["readme_pair"]["per_gpu_rate"])
    report["sensitivity"] = sensitivity
    report["total_wall_s"] = time.perf_counter() - start
    folder.write_table(STUDY_FILE, table)
    folder.write_json(PLACEMENT_FILE, report)
    chosen = report["chosen"] or {}
    metrics = {"study": cfg.study.kind, "figure": cfg.study.figure, "method": params["method"],
               **{k: chosen.get(k) for k in ("prefill_tp", "prefill_pp", "decode_tp", "decode_pp", "n_gpus",
                                             "rate_rps")},
               "per_gpu_goodput_rps": report["per_gpu_goodput_rps"], "n_tied": len(report["tied"]),
               "readme_pair_per_gpu_rate": report["readme_pair"]["per_gpu_rate"],
               "n_simulations": report["n_simulations"], "search_wall_s": report["search_wall_s"],
               "total_wall_s": report["total_wall_s"]}
    log.info("placement (simdistserve pairs): %s at %s req/s per GPU, %d tied, in %.2f s, %d simulations",
             chosen, report["per_gpu_goodput_rps"], len(report["tied"]), report["total_wall_s"],
             report["n_simulations"])
    return JobResult(metrics=metrics, workload=workload, files={"study": STUDY_FILE, "placement": PLACEMENT_FILE},
                     tables={"study": table})


def run_placement_search(cfg: Config, folder: RunFolder) -> JobResult:
    """The whole job: search, then ``study.csv`` and ``placement.json`` in ``folder``."""
    if placement_params(cfg.study)["method"] == "simdistserve":
        return run_pair_search(cfg, folder)
    start = time.perf_counter()
    params = placement_params(cfg.study)
    with _pool(cfg, params, folder) as pool:
        result, params, workload = plan_placement(cfg, pool)
    table = candidate_table(result)
    report = placement_report(cfg, result, params, workload)
    report["total_wall_s"] = time.perf_counter() - start  # workload loading included
    folder.write_table(STUDY_FILE, table)
    folder.write_json(PLACEMENT_FILE, report)
    metrics = summary_metrics(cfg, report)
    verified = metrics["verified_per_gpu_goodput_rps"]
    log.info("placement: %s; %.3f req/s per GPU (end to end: %s) in %.2f s, %d simulations", report["chosen"],
             report["per_gpu_goodput_rps"] or 0.0, "n/a" if verified is None else f"{verified:.3f}",
             report["total_wall_s"], report["n_simulations"])
    return JobResult(metrics=metrics, workload=workload, files={"study": STUDY_FILE, "placement": PLACEMENT_FILE},
                     tables={"study": table})
