"""``job=serve``: bring a deployment up once, run every measured point on it, and write records,
metrics and validity per point.

Points come from ``sweep.rates_rps`` (each overrides ``workload.arrival.rate_rps``) or, when that is
empty, are the workload's own arrivals. Every point's workload is built (and so validated) before the
deployment is brought up, so that a bad trace fails in seconds instead of after a full server start; only
the deployment-dependent preparation (context capping, predicted hit rate) happens once it is up. All points' records go to one ``requests.parquet`` with a
``point`` column; ``points.csv`` has one row of metrics per point. If a component dies, the records
measured so far are still written, then the job fails. On a real engine (not the simulator) each point is
watched by :class:`harness.host_load.HostLoadMonitor` (CPU used outside the job, steal time) and checked for
overload; both go into its validity block and its ``outside_cpu_share``, ``steal_share`` and ``overloaded``
columns.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from harness.config import Config
from harness.engines import open_deployment
from harness.host_load import HostLoadMonitor
from harness.host_saturation import MeasuredSaturation, measure_saturation, saturation_requests, sized_points
from harness.jobs import JobResult, Laps
from harness.metrics import RecordColumns, extract_columns, request_frame, summarize
from harness.prompts import fit_to_context, predicted_prefix_hit_rate
from harness.results import RunFolder, columns_frame, records_frame
from harness.validity import assess_validity
from systems.contract import Deployment, EngineResult
from vocab.result_files import POINTS_FILE, REQUESTS_FILE
from workloads.base import WorkloadRequests
from workloads.config import WorkloadConfig
from workloads.load_point import workload_at
from workloads.registry import build_workload, to_workload_config

log = logging.getLogger(__name__)


PointRequests = list[tuple[float | None, WorkloadRequests]]


@dataclass(frozen=True)
class ServePlan:
    """What a serving job serves, built from the config once and before the deployment starts (a missing
    trace, a malformed row or an impossible workload fails in seconds, not after a server start): the typed
    workload config, and either the points of ``sweep.rates_rps`` (or the workload's own arrivals) or, with
    ``sweep.saturation_fractions``, the closed-loop requests that measure the saturation rate (the points are
    then built from ``workload`` once that rate is known)."""

    workload: WorkloadConfig
    points: PointRequests
    saturation_requests: WorkloadRequests | None = None


def plan_serve(cfg: Config) -> ServePlan:
    """The :class:`ServePlan` of ``cfg`` (``ConfigError`` or ``WorkloadError`` on a bad workload)."""
    workload = to_workload_config(cfg.workload)
    if cfg.sweep.saturation_fractions:
        return ServePlan(workload, [], saturation_requests(cfg, workload))
    if not cfg.sweep.rates_rps:
        return ServePlan(workload, [(None, build_workload(workload, data_dir=cfg.data_dir).requests())])
    points: PointRequests = []
    for rate in cfg.sweep.rates_rps:
        at_rate = workload_at(workload, rate_rps=rate, rate_key="sweep.rates_rps")
        points.append((float(rate), build_workload(at_rate, data_dir=cfg.data_dir).requests()))
    return ServePlan(workload, points)


def _prepare(requests: WorkloadRequests, deployment: Deployment, cfg: Config) -> tuple[WorkloadRequests, dict[str, Any]]:
    info: dict[str, Any] = {}
    limit = deployment.context_limit
    if limit is not None and cfg.engine.cap_to_context:
        requests, info = fit_to_context(requests, limit)
        if info["n_prompt_capped"] or info["n_output_capped"]:
            log.warning("%d prompts and %d outputs capped to fit a %d-token context", info["n_prompt_capped"],
                        info["n_output_capped"], limit)
    info["predicted_prefix_hit_rate"] = predicted_prefix_hit_rate(requests.specs, deployment.kv_block_size)
    return requests, info


def _point_frame(index: int, rate: float | None, result: EngineResult,
                 columns: RecordColumns | None = None) -> pd.DataFrame:
    """The point's rows of ``requests.parquet``: its records after a ``point`` and a ``rate_rps`` column
    (from the engine's columns when it gave them, without reading the records)."""
    frame = columns_frame(columns) if result.columns is not None and columns is not None else None
    if frame is None:
        frame = records_frame(result.records, None if columns is None else columns.chunk_times_s)
    frame.insert(0, "point", index)
    frame.insert(1, "rate_rps", rate)
    return frame


def _host_columns(validity: dict[str, Any]) -> dict[str, Any]:
    """The ``points.csv`` columns of a real point's host-load and overload blocks."""
    host, overload = validity.get("host_load") or {}, validity.get("overload") or {}
    return {"outside_cpu_share": host.get("outside_cpu_share"), "steal_share": host.get("steal_share"),
            "overloaded": overload.get("overloaded") if overload.get("checked") else None}


@dataclass(frozen=True)
class ServedPoint:
    """One measured point: the requests as served (capped to the context), the engine's result, its row."""

    rate_rps: float | None
    requests: WorkloadRequests
    result: EngineResult
    validity: dict[str, Any]
    row: dict[str, Any]
    columns: RecordColumns | None = None  # the records as columns (harness.metrics), extracted once


RecordsHook = Callable[[EngineResult, RecordColumns], None]


def serve_point(cfg: Config, deployment: Deployment, folder: RunFolder, index: int, n_points: int,
                rate: float | None, built: WorkloadRequests, saturation_rps: float | None = None,
                on_records: RecordsHook | None = None) -> ServedPoint:
    """Run one point on an open deployment and assess it (real engines: host load and overload too).
    ``on_records(result, columns)``, when given, is called once the point's records exist, before they are
    summarised."""
    requests, prep = _prepare(built, deployment, cfg)
    label = f"point {index + 1}/{n_points}" + (f" at {rate:g} req/s" if rate else "")
    log.info("%s: %d requests, offered %.3f req/s", label, len(requests.specs), requests.schedule.offered_rate_rps)
    real = cfg.engine.name != "sim"
    if real:
        with HostLoadMonitor() as monitor:
            result = deployment.run_point(requests, folder)
        host_args: dict[str, Any] = {"host_load": monitor.result(), "check_overload": True,
                                     "saturation_rps": saturation_rps}
    else:
        result = deployment.run_point(requests, folder)
        host_args = {}
    columns = extract_columns(result.columns if result.columns is not None else result.records)
    if on_records is not None:
        on_records(result, columns)
    metrics = summarize(columns, cfg.slo, n_gpus=result.n_gpus)
    validity = assess_validity(result.records, metrics, cfg.validity, result.invalid_reasons,
                               offered_rate_rps=requests.schedule.offered_rate_rps, columns=columns, **host_args)
    row = {"point": index, "rate_rps": rate, "offered_rate_rps": requests.schedule.offered_rate_rps,
           **prep, **{f"engine_{k}": v for k, v in result.info.items()}, **metrics,
           "valid": validity["valid"], "validity_reasons": "; ".join(validity["reasons"])}
    if real:
        row.update(_host_columns(validity))
    if saturation_rps is not None:
        row["saturation_rps"] = saturation_rps
        row["saturation_fraction"] = rate / saturation_rps if rate else None
    return ServedPoint(rate, requests, result, validity, row, columns)


class _PointFiles:
    """``requests.parquet`` and ``points.csv`` of a serving job's points. Each point's rows of
    ``requests.parquet`` are kept as soon as its records exist; :meth:`write` writes both files, or, when the
    run ended before its last point's records, the points measured (nothing when there were none)."""

    def __init__(self, folder: RunFolder) -> None:
        self.folder = folder
        self.frames: list[pd.DataFrame] = []

    def records_hook(self, index: int, rate: float | None) -> RecordsHook:
        """The ``on_records`` of point ``index``."""
        def keep(result: EngineResult, columns: RecordColumns) -> None:
            self.frames.append(_point_frame(index, rate, result, columns))
        return keep

    def write(self, rows: list[dict[str, Any]]) -> None:
        """Write ``points.csv`` (``rows``) and ``requests.parquet``."""
        if not self.frames:
            return
        try:
            self.folder.write_table(POINTS_FILE, pd.DataFrame(rows))
        finally:
            self.folder.write_table(REQUESTS_FILE, pd.concat(self.frames, ignore_index=True))


@dataclass
class _ServedPoints:
    """What :func:`_serve_points` measured: each point's row and validity, the last point's workload
    statistics and columns, and the saturation rate the points were sized to."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    validities: list[dict[str, Any]] = field(default_factory=list)
    workload_stats: dict[str, Any] = field(default_factory=dict)
    last_columns: RecordColumns | None = None
    saturation: MeasuredSaturation | None = None
    phases: dict[str, float] = field(default_factory=dict)  # PHASES: wall seconds of each part of the job


# where a serving job's wall time goes (summary.json and the compare table): bringing the deployment up, measuring
# its capacity (sweep.saturation_fractions), serving the measured points, taking it down
PHASES = ("startup_wall_s", "capacity_probe_wall_s", "points_wall_s", "shutdown_wall_s")


def _serve_points(cfg: Config, folder: RunFolder, deployment_factory: Callable[[Any, RunFolder], Deployment],
                  plan: ServePlan, files: _PointFiles, served: list[ServedPoint] | None) -> _ServedPoints:
    """Bring the deployment up, run every point on it and write the points' files (also when a point fails).
    Nothing of the deployment outlives this call but what ``served`` receives."""
    done = _ServedPoints()
    points = plan.points
    lap = Laps()
    with deployment_factory(cfg, folder) as deployment:
        try:
            done.phases["startup_wall_s"] = lap()
            if plan.saturation_requests is not None:
                done.saturation = measure_saturation(deployment, plan.saturation_requests, cfg, folder)
                points = sized_points(cfg, plan.workload, done.saturation)
                deployment.check_health()
            done.phases["capacity_probe_wall_s"] = lap()
            for index, (rate, built) in enumerate(points):
                point = serve_point(cfg, deployment, folder, index, len(points), rate, built,
                                    done.saturation.saturation_rps if done.saturation else None,
                                    on_records=files.records_hook(index, rate))
                if served is not None:
                    served.append(point)
                done.rows.append(point.row)
                done.validities.append(point.validity)
                done.workload_stats = {**point.requests.stats,
                                       "offered_rate_rps": point.requests.schedule.offered_rate_rps,
                                       **{k: point.row[k] for k in ("n_prompt_capped", "n_output_capped",
                                                                    "predicted_prefix_hit_rate") if k in point.row}}
                done.last_columns = point.columns
                deployment.check_health()
            done.phases["points_wall_s"] = lap()
        finally:
            files.write(done.rows)  # what was measured, even when a component died mid-run
    done.phases["shutdown_wall_s"] = lap()
    log.info("wall time: %s", ", ".join(f"{k.removesuffix('_wall_s').replace('_', ' ')} {v:.1f} s"
                                        for k, v in done.phases.items()))
    return done


def run_serve(cfg: Config, folder: RunFolder,
              deployment_factory: Callable[[Any, RunFolder], Deployment] = open_deployment,
              plan: ServePlan | None = None, served: list[ServedPoint] | None = None) -> JobResult:
    """Run every point on one deployment and summarise each. ``plan`` (:func:`plan_serve`) is built here, before
    the deployment, when not given. With ``sweep.saturation_fractions`` the deployment's saturation rate is
    measured first and the points are sized to it (:mod:`harness.host_saturation`). ``served``, when given,
    receives every :class:`ServedPoint`."""
    plan = plan_serve(cfg) if plan is None else plan
    done = _serve_points(cfg, folder, deployment_factory, plan, _PointFiles(folder), served)
    rows, validities = done.rows, done.validities
    published = cfg.logger.name != "none"  # tables only for a tracker to publish
    if len(rows) == 1:
        metrics_out: dict[str, Any] = dict(rows[0])
        validity_out = validities[0]
        tables = {"requests": request_frame(done.last_columns if done.last_columns is not None else ())} if published else {}
    else:
        metrics_out = {"points": rows}
        validity_out = {"valid": all(v["valid"] for v in validities),
                        "reasons": [f"point {i}: {r}" for i, v in enumerate(validities) for r in v["reasons"]],
                        "points": validities}
        tables = {"points": pd.DataFrame(rows)} if published else {}
    if done.saturation is not None:
        metrics_out = {**metrics_out, **done.saturation.as_row()}
    metrics_out = {**metrics_out, **done.phases}
    return JobResult(metrics=metrics_out, validity=validity_out, workload=done.workload_stats,
                     files={"requests": REQUESTS_FILE, "points": POINTS_FILE}, tables=tables)
