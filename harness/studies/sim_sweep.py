"""``job=sim_study study.kind=sim_sweep``: every variant (a composed deployment) at every load point,
one simulation each. Writes ``study.csv`` (one row per variant and point: the deployment, the load,
every metric of ``harness.metrics.summarize``, the simulator's counters and
``workload_prefix_hit_rate_tokens``, the token hit rate an infinite prefix cache seeing every request would reach:
the workload's theoretical hit rate), ``requests.parquet``
(every record, with ``variant`` and ``point`` columns; left out with ``study.write_requests=false``) and
``load.csv`` (per-instance load samples).

``study.tbt_thresholds_ms`` adds ``attainment_tbt_<x>ms`` columns: SLO attainment with the TBT bound
replaced by each threshold (Mooncake judges capacity at 100, 200 and 300 ms).

``study.slo_scales`` also writes ``slo_scale.csv`` (per variant, point and scale: attainment with every
bound multiplied by the scale, jointly and per bound) and ``slo_crossing.csv`` (the scale at which each
variant's attainment crosses the target, DistServe's "tighter SLO" measure; :mod:`harness.studies.slo_scale`).

A sweep over load points (``study.rates_rps``, ``per_gpu_rates`` or ``speedups``) also writes
``capacity.csv``: for every variant and attainment column, the highest load meeting the SLO's attainment
target (:func:`harness.capacity.capacity_at`), over the offered rate and, when the points are per-GPU
rates, over the per-GPU rate. Figures and the report read it; they never recompute it.

Every point is assessed against the variant's ``validity`` block (:mod:`harness.validity`): ``study.csv``
has ``valid`` and ``validity_reasons`` per point and ``summary.json``'s validity block holds every point's.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any, Optional

import pandas as pd
from tqdm.auto import tqdm

from harness.capacity import capacity_at
from harness.config import Config, StudyConfig
from harness.jobs import JobResult
from harness.metrics import summarize
from harness.results import RunFolder, records_frame
from harness.studies.simulate import load_requests, point_workload, simulate
from harness.studies.slo_scale import crossing_table, scale_rows
from harness.studies.variants import compose_variant, describe_variant, job_overrides
from harness.validity import assess_validity, combine_validity
from systems.engine_config import SimEngineConfig
from systems.sim.simulated_deployment import SimulatedDeployment
from vocab.errors import ConfigError
from vocab.result_files import (
    CAPACITY_FILE,
    LOAD_FILE,
    REQUESTS_FILE,
    SLO_CROSSING_FILE,
    SLO_SCALE_FILE,
    STUDY_FILE,
)

log = logging.getLogger(__name__)

THRESHOLD_PREFIX = "attainment_tbt_"
CAPACITY_LOADS = ("offered_rate_rps", "per_gpu_rate")  # load columns capacity is read over


def load_points(study: StudyConfig, n_gpus: int) -> list[dict[str, Optional[float]]]:
    """The load points of one variant: rate, per-GPU rate or speedup (one point at the workload's own
    arrivals when none is given)."""
    if study.per_gpu_rates:
        return [{"per_gpu_rate": r, "rate_rps": r * n_gpus, "speedup": None} for r in study.per_gpu_rates]
    if study.rates_rps:
        return [{"per_gpu_rate": r / n_gpus, "rate_rps": r, "speedup": None} for r in study.rates_rps]
    if study.speedups:
        return [{"per_gpu_rate": None, "rate_rps": None, "speedup": s} for s in study.speedups]
    return [{"per_gpu_rate": None, "rate_rps": None, "speedup": None}]


def threshold_columns(records: Any, slo: Any, thresholds: list[float]) -> dict[str, Any]:
    """Attainment with the TBT bound set to each threshold."""
    out = {}
    for x in thresholds:
        metrics = summarize(records, dataclasses.replace(slo, tbt_ms=float(x)))
        out[f"{THRESHOLD_PREFIX}{x:g}ms"] = metrics["slo_attainment"]
    return out


def capacity_table(table: pd.DataFrame, thresholds: list[float]) -> pd.DataFrame:
    """``capacity.csv``: per attainment column (``slo_attainment``, then one per TBT threshold), load
    column and variant, the highest load whose attainment reaches the variant's target."""
    columns = [("slo_attainment", math.nan)] + [(f"{THRESHOLD_PREFIX}{x:g}ms", float(x)) for x in thresholds]
    rows = []
    for column, threshold in columns:
        for load in CAPACITY_LOADS:
            if load not in table or table[load].isna().all():
                continue
            for variant, part in table.groupby("variant", sort=False):
                if part[[load, column]].dropna().empty:
                    continue
                target = float(part["slo_attainment_target"].iloc[0])
                cap = capacity_at(part[load], part[column], target)
                rows.append({"variant": variant, "attainment": column, "tbt_threshold_ms": threshold, "load": load,
                             "capacity": cap.value, "bound": cap.bound, "lowest_measured": cap.lowest,
                             "highest_measured": cap.highest, "target": target, "label": str(cap)})
    return pd.DataFrame(rows)


def run_sim_sweep(cfg: Config, folder: RunFolder) -> JobResult:
    study = cfg.study
    variants = dict(study.variants) or {"default": []}
    base = job_overrides()
    deployments = {}
    for label, overrides in variants.items():  # compose and check every variant before simulating any
        vcfg = compose_variant([*base, *overrides])
        if not isinstance(vcfg.engine, SimEngineConfig):
            raise ConfigError(f"study.variants.{label}: job=sim_study runs engine=sim, got engine={vcfg.engine.name}")
        deployments[label] = SimulatedDeployment(vcfg)
    jobs = [(label, i, p) for label, c in deployments.items() for i, p in enumerate(load_points(study, c.n_gpus))]
    rows: list[dict[str, Any]] = []
    frames: list[pd.DataFrame] = []
    loads: list[pd.DataFrame] = []
    scaled: list[dict[str, Any]] = []
    validities: dict[str, dict[str, Any]] = {}
    for label, index, point in tqdm(jobs, desc="simulations", unit="sim", disable=not cfg.engine.progress):
        deployment = deployments[label]
        vcfg = deployment.cfg
        wcfg = point_workload(vcfg, point["rate_rps"], point["speedup"], study.max_requests)
        requests = load_requests(vcfg, wcfg)
        result = simulate(deployment, requests, keep_load=True)
        validity = assess_validity(result.records, result.metrics, vcfg.validity,
                                   offered_rate_rps=requests.schedule.offered_rate_rps)
        validities[f"{label} point {index}"] = validity
        row = {"variant": label, "point": index, **point, "n_gpus": deployment.n_gpus,
               "valid": validity["valid"], "validity_reasons": "; ".join(validity["reasons"]),
               "offered_rate_rps": requests.schedule.offered_rate_rps,
               "workload_prefix_hit_rate_tokens": requests.stats.get("prefix_hit_rate_tokens", math.nan),
               **describe_variant(vcfg),
               **{k: v for k, v in result.metrics.items() if not isinstance(v, dict | list)},
               **threshold_columns(result.records, vcfg.slo, list(study.tbt_thresholds_ms)),
               **{f"sim_{k}": v for k, v in result.info.items()}, "sim_wall_s": result.wall_s}
        rows.append(row)
        scaled += [{"variant": label, "point": index, "per_gpu_rate": point["per_gpu_rate"],
                    "target": vcfg.slo.attainment_target, **r}
                   for r in scale_rows(result.records, vcfg.slo, list(study.slo_scales))]
        log.info("%s point %d: %s", label, index, ", ".join(
            f"{k}={row[k]:.3g}" for k in ("offered_rate_rps", "slo_attainment", "mean_ttft_ms", "p90_tpot_ms")
            if isinstance(row.get(k), float)))
        if study.write_requests:
            frame = records_frame(result.records)
            frame.insert(0, "variant", label)
            frame.insert(1, "point", index)
            frames.append(frame)
        if result.load_samples:
            load = pd.DataFrame(result.load_samples)
            load.insert(0, "variant", label)
            load.insert(1, "point", index)
            loads.append(load)
    table = pd.DataFrame(rows)
    folder.write_table(STUDY_FILE, table)
    files = {"study": STUDY_FILE}
    if study.write_requests:
        folder.write_table(REQUESTS_FILE, pd.concat(frames, ignore_index=True))
        files["requests"] = REQUESTS_FILE
    if loads:
        folder.write_table(LOAD_FILE, pd.concat(loads, ignore_index=True))
        files["load"] = LOAD_FILE
    if scaled:
        scale_table = pd.DataFrame(scaled)
        folder.write_table(SLO_SCALE_FILE, scale_table)
        folder.write_table(SLO_CROSSING_FILE, crossing_table(scale_table))
        files.update({"slo_scale": SLO_SCALE_FILE, "slo_crossing": SLO_CROSSING_FILE})
    if study.rates_rps or study.per_gpu_rates or study.speedups:
        folder.write_table(CAPACITY_FILE, capacity_table(table, list(study.tbt_thresholds_ms)))
        files["capacity"] = CAPACITY_FILE
    metrics = {"study": study.kind, "figure": study.figure, "n_simulations": len(rows),
               "simulated_requests": int(table["n_issued"].sum()) if "n_issued" in table else 0,
               "simulation_wall_s": float(table["sim_wall_s"].sum())}
    validity = combine_validity(validities, kind="points")
    if not validity["valid"]:
        log.warning("%d of %d simulated points are invalid (summary.json validity; study.csv validity_reasons)",
                    sum(not v["valid"] for v in validities.values()), len(validities))
    return JobResult(metrics=metrics, validity=validity, files=files, tables={"study": table})
