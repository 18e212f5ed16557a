"""``job=sim_vs_real`` (``experiment=sim_vs_real_cpu``): does the simulator predict the real engine?

1. The profile: ``sim_vs_real.profile``, or, when that is null, a calibration of this host run first
   (``<job>/calibrate/``, the ``calibrate_cpu`` preset with this job's model and ``calibrate.*`` settings).
2. Every ``study.variants`` design is served on real processes as a serving job of its own
   (``<job>/real/<design>/``): its saturation rate is measured on this host, then it is offered
   ``sweep.saturation_fractions`` of it (:mod:`harness.host_saturation`), each point watched for host
   interference and overload (:mod:`harness.validity`).
3. The same design is simulated (``sim_vs_real.sim_overrides``: ``engine=sim engine.perf_model=fitted``
   with the profile, plus ``sim_vs_real.design_sim_overrides[<design>]``) on the very requests each real point
   served, capped to the context as they were (``<job>/sim/<design>/``).
4. ``calibration.csv``: one row per design, rate and metric (median and p90 TTFT and TPOT, goodput, and for
   P/D designs the mean KV transfer time) with ``measured``, ``predicted`` and ``rel_error`` =
   (predicted - measured) / measured, the point's validity and whether the metric meets its goal
   (``sim_vs_real.goals``: colocated / disaggregated, for ``sim_vs_real.goal_metrics``) on a valid point, and
   the cores the job's processes used during the real point (``job_cpu_cores``: the simulator gives every
   instance a core of its own and nothing else).
   ``study.csv`` has every real and simulated point's metrics side by side.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from harness.calibrate.job import run_calibrate
from harness.config import Config
from harness.engines import open_deployment
from harness.jobs import JobResult
from harness.metrics import summarize
from harness.results import RunFolder, records_frame
from harness.serve_job import ServedPoint, ServePlan, plan_serve, run_serve
from harness.studies.variants import compose_variant, job_overrides
from harness.validity import combine_validity
from systems.contract import Deployment
from systems.sim.engine import SimEngine
from systems.topology import topology_of
from vocab.errors import ConfigError
from vocab.result_files import CALIBRATION_FILE, PROFILE_FILE, REQUESTS_FILE, STUDY_FILE
from workloads.registry import build_workload

log = logging.getLogger(__name__)

COMPARED = ("median_ttft_ms", "p90_ttft_ms", "median_tpot_ms", "p90_tpot_ms", "goodput_rps")
CALIBRATE_DIR, REAL_DIR, SIM_DIR = "calibrate", "real", "sim"
# command-line overrides a calibration run inside this job inherits
_CALIBRATE_PREFIXES = ("calibrate.", "engine.load.", "model=", "data_dir=", "seed=")


def mean_kv_transfer_ms(records: Any) -> float:
    """Mean KV transfer time (ms) over the requests that report one; nan when none does."""
    values = [r.extra["kv_transfer_s"] for r in records
              if isinstance(r.extra.get("kv_transfer_s"), float) and math.isfinite(r.extra["kv_transfer_s"])
              and r.extra["kv_transfer_s"] > 0]
    return float(np.mean(values)) * 1e3 if values else math.nan


def compared_metrics(records: Any, cfg: Config, n_gpus: int) -> dict[str, float]:
    metrics = summarize(records, cfg.slo, n_gpus=n_gpus)
    out = {k: float(metrics[k]) if metrics.get(k) is not None else math.nan for k in COMPARED}
    out["mean_kv_transfer_ms"] = mean_kv_transfer_ms(records)
    return out


def calibrate_here(cfg: Config, folder: RunFolder) -> str:
    """Calibrate this host into ``<job>/calibrate/`` and return the profile's path."""
    inherited = [o for o in job_overrides() if o.startswith(_CALIBRATE_PREFIXES)]
    cal_cfg = compose_variant(["experiment=calibrate_cpu", f"model={cfg.model.name}", *inherited])
    sub = RunFolder(folder.path / CALIBRATE_DIR)
    sub.path.mkdir(parents=True, exist_ok=True)
    log.info("no sim_vs_real.profile given: calibrating this host first (%s)", sub.path)
    run_calibrate(cal_cfg, sub)
    return str(sub.file(PROFILE_FILE))


def check_simulable(scfg: Config, rcfg: Config, plan: ServePlan, folder: RunFolder) -> None:
    """Open the simulated deployment (the profile read and matched to this host and model) and check that the
    profile covers the design's workload (its requests, of which every point serves the first ones), before any
    server starts."""
    requests = build_workload(plan.workload, data_dir=rcfg.data_dir).requests()
    with SimEngine(scfg, folder) as sim:
        sim.check_coverage(requests)


def rows_for_point(design: str, disaggregated: bool, point: ServedPoint, real: dict[str, float],
                   sim: dict[str, float], cfg: Config) -> list[dict[str, Any]]:
    """calibration.csv rows of one design at one rate."""
    goal = cfg.sim_vs_real.goals["disaggregated" if disaggregated else "colocated"]
    metrics = [*COMPARED, *(("mean_kv_transfer_ms",) if disaggregated else ())]
    host = point.validity.get("host_load") or {}
    wall, job_cpu = host.get("wall_s"), host.get("job_cpu_s")
    job_cores = job_cpu / wall if isinstance(wall, float | int) and wall and isinstance(job_cpu, float | int) else math.nan
    rows = []
    for metric in metrics:
        measured, predicted = real[metric], sim[metric]
        rel = (predicted - measured) / measured if measured and math.isfinite(measured) else math.nan
        gated = metric in cfg.sim_vs_real.goal_metrics
        rows.append({
            "design": design, "rate_rps": point.rate_rps, "saturation_fraction": point.row.get("saturation_fraction"),
            "metric": metric, "measured": measured, "predicted": predicted, "rel_error": rel,
            "valid": bool(point.validity.get("valid")), "validity_reasons": "; ".join(point.validity.get("reasons", [])),
            "job_cpu_cores": job_cores,
            "goal": goal if gated else math.nan,
            "within_goal": (bool(abs(rel) <= goal) if math.isfinite(rel) else False) if gated else None,
        })
    return rows


def run_sim_vs_real(cfg: Config, folder: RunFolder,
                    deployment_factory: Callable[[Any, RunFolder], Deployment] = open_deployment) -> JobResult:
    """Serve, simulate and compare every design (see the module docstring)."""
    designs = dict(cfg.study.variants)
    if not designs:
        raise ConfigError("study.variants: job=sim_vs_real needs at least one design (label: [overrides])")
    if not cfg.sweep.saturation_fractions:
        raise ConfigError("sweep.saturation_fractions: job=sim_vs_real offers fractions of each design's saturation rate "
                          "measured on this host; set e.g. sweep.saturation_fractions=[0.5,0.8]")
    unknown = sorted(set(cfg.sim_vs_real.design_sim_overrides) - set(designs))
    if unknown:
        raise ConfigError(f"sim_vs_real.design_sim_overrides: {', '.join(unknown)} not among study.variants "
                          f"({', '.join(designs)})")
    base = [o for o in job_overrides() if not o.startswith("job=")]
    sim_base = [o for o in base if not o.startswith(("engine.", "engine="))]  # the real engine's settings stay real
    real_cfgs = {d: compose_variant([*base, *ov, "job=serve"]) for d, ov in designs.items()}
    plans = {d: plan_serve(rcfg) for d, rcfg in real_cfgs.items()}  # every workload built before any server starts
    profile = cfg.sim_vs_real.profile
    sim_extra = lambda d, path: [*cfg.sim_vs_real.sim_overrides, f"engine.profile={path}",  # noqa: E731
                                 *cfg.sim_vs_real.design_sim_overrides.get(d, [])]
    if profile:  # a bad profile, a simulator override or a workload the profile does not cover fails here
        for d, ov in designs.items():
            check_simulable(compose_variant([*sim_base, *ov, *sim_extra(d, profile), "job=serve"]), real_cfgs[d],
                            plans[d], folder)
    else:
        profile = calibrate_here(cfg, folder)
    rows: list[dict[str, Any]] = []
    study: list[dict[str, Any]] = []
    frames: list[pd.DataFrame] = []
    validities: dict[str, dict[str, Any]] = {}
    for design, overrides in designs.items():
        rcfg = real_cfgs[design]
        disaggregated = topology_of(rcfg.system.name).disaggregated
        real_folder = RunFolder(folder.path / REAL_DIR / design)
        real_folder.path.mkdir(parents=True, exist_ok=True)
        served: list[ServedPoint] = []
        log.info("design %s: real deployment (system=%s)", design, rcfg.system.name)
        result = run_serve(rcfg, real_folder, deployment_factory, plans[design], served=served)
        validities[design] = result.validity
        scfg = compose_variant([*sim_base, *overrides, *sim_extra(design, profile), "job=serve"])
        sim_folder = RunFolder(folder.path / SIM_DIR / design)
        sim_folder.path.mkdir(parents=True, exist_ok=True)
        with SimEngine(scfg, sim_folder) as sim:
            for index, point in enumerate(served):
                sim_result = sim.run_point(point.requests, sim_folder)
                real_m = compared_metrics(point.result.records, rcfg, point.result.n_gpus)
                sim_m = compared_metrics(sim_result.records, scfg, sim_result.n_gpus)
                rows += rows_for_point(design, disaggregated, point, real_m, sim_m, cfg)
                for source, m in (("real", real_m), ("sim", sim_m)):
                    study.append({"design": design, "source": source, "point": index, "rate_rps": point.rate_rps,
                                  "saturation_rps": point.row.get("saturation_rps"), **m,
                                  "valid": point.validity.get("valid") if source == "real" else None})
                for source, records in (("real", point.result.records), ("sim", sim_result.records)):
                    frame = records_frame(records)
                    frame.insert(0, "design", design)
                    frame.insert(1, "source", source)
                    frame.insert(2, "point", index)
                    frames.append(frame)
    table = pd.DataFrame(rows)
    folder.write_table(CALIBRATION_FILE, table)
    folder.write_table(STUDY_FILE, pd.DataFrame(study))
    folder.write_table(REQUESTS_FILE, pd.concat(frames, ignore_index=True))
    gated = table[table["within_goal"].notna()]
    valid = gated[gated["valid"]]
    metrics = {"profile": profile, "designs": list(designs), "points": int(len(study) // 2),
               "gated_valid": int(len(valid)), "within_goal": int(valid["within_goal"].astype(bool).sum()),
               "median_abs_rel_error": {m: float(table.loc[table["metric"] == m, "rel_error"].abs().median())
                                        for m in table["metric"].unique()}}
    log.info("within goal: %d of %d gated metrics on valid points", metrics["within_goal"], metrics["gated_valid"])
    return JobResult(metrics=metrics, validity=combine_validity(validities, kind="designs"),
                     files={"calibration": CALIBRATION_FILE, "study": STUDY_FILE, "requests": REQUESTS_FILE},
                     tables={"calibration": table})
