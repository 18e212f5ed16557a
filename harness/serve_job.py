"""``job=serve``: bring a deployment up once, run every measured point on it, and write records,
metrics and validity per point.

Points come from ``sweep.rates_rps`` (each overrides ``workload.arrival.rate_rps``) or, when that is
empty, are the workload's own arrivals. Every point's workload is built (and so validated) before the
deployment is brought up, so that a bad trace fails in seconds instead of after a full server start; only
the deployment-dependent preparation (context capping, predicted hit rate) happens once it is up. All points' records go to one ``requests.parquet`` with a
``point`` column; ``points.csv`` has one row of metrics per point. If a component dies, the records
measured so far are still written, then the job fails. The last point's ``requests.parquet`` is written
in a thread while that point is summarised (:class:`_PointFiles`), and each point runs with the cyclic
garbage collector paused (:mod:`harness.collector`). On a real engine (not the simulator) each point is
watched by :class:`harness.host_load.HostLoadMonitor` (CPU used outside the job, steal time) and checked for
overload; both go into its validity block and its ``outside_cpu_share``, ``steal_share`` and ``overloaded``
columns.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.collector import collector_paused, release_frozen
from harness.config import Config
from harness.engines import open_deployment
from harness.host_capacity import MeasuredCapacity, check_capacity_sizing, measure_capacity, sized_points
from harness.host_load import HostLoadMonitor
from harness.jobs import JobResult
from harness.metrics import RecordColumns, extract_columns, request_frame, summarize
from harness.prompts import fit_to_context, predicted_prefix_hit_rate
from harness.result_files import POINTS_FILE, REQUESTS_FILE
from harness.results import RunFolder, columns_table, records_table
from harness.tables import Table
from harness.validity import assess_validity
from systems.contract import Deployment, EngineResult
from workloads.base import WorkloadRequests
from workloads.config import WorkloadConfig
from workloads.load_point import workload_at
from workloads.registry import build_workload, to_workload_config

log = logging.getLogger(__name__)


def point_workloads(cfg: Config) -> list[tuple[float | None, WorkloadConfig]]:
    """(rate or None, workload config) of every measured point."""
    if not cfg.sweep.rates_rps:
        return [(None, to_workload_config(cfg.workload))]
    return [(float(rate), workload_at(cfg.workload, rate_rps=rate, rate_key="sweep.rates_rps"))
            for rate in cfg.sweep.rates_rps]


PointRequests = list[tuple[float | None, WorkloadRequests]]


def build_point_requests(cfg: Config) -> PointRequests:
    """(rate or None, requests) of every measured point, built from the workload config (raises on a bad
    workload: a missing trace, a malformed row, an impossible config)."""
    return [(rate, build_workload(wcfg, data_dir=cfg.data_dir).requests()) for rate, wcfg in point_workloads(cfg)]


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
                 columns: RecordColumns | None = None) -> Table:
    """The point's rows of ``requests.parquet``: its records after a ``point`` and a ``rate_rps`` column
    (from the engine's columns when it gave them, without reading the records)."""
    table = columns_table(columns) if result.columns is not None and columns is not None else None
    if table is None:
        table = records_table(result.records, None if columns is None else columns.chunk_times_s,
                              None if columns is None else columns.extra)
    return table.insert(0, "point", index).insert(1, "rate_rps", rate)


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
                rate: float | None, built: WorkloadRequests, capacity_rps: float | None = None,
                on_records: RecordsHook | None = None) -> ServedPoint:
    """Run one point on an open deployment and assess it (real engines: host load and overload too).
    ``on_records(result, columns)``, when given, is called once the point's records exist, before they are
    summarised."""
    requests, prep = _prepare(built, deployment, cfg)
    label = f"point {index + 1}/{n_points}" + (f" at {rate:g} req/s" if rate else "")
    log.info("%s: %d requests, offered %.3f req/s", label, len(requests.specs), requests.schedule.offered_rate_rps)
    real = cfg.engine.name != "sim"
    with collector_paused():  # what the point keeps alive is never walked by the collector (harness.collector)
        if real:
            with HostLoadMonitor() as monitor:
                result = deployment.run_point(requests, folder)
            host_args: dict[str, Any] = {"host_load": monitor.result(), "check_overload": True,
                                         "capacity_rps": capacity_rps}
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
    if capacity_rps is not None:
        row["capacity_rps"] = capacity_rps
        row["capacity_fraction"] = rate / capacity_rps if rate else None
    return ServedPoint(rate, requests, result, validity, row, columns)


class _PointFiles:
    """``requests.parquet`` and ``points.csv`` of a serving job's points. Each point's rows of
    ``requests.parquet`` are kept as soon as its records exist; the last point's start the file's write in a
    thread (:mod:`harness.background_write`: Arrow's encoding and the fsync run on the other core while the
    point is summarised). :meth:`write` writes ``points.csv`` and waits for that write, or, when the run ended
    before its last point's records, writes the points measured (nothing when there were none)."""

    def __init__(self, folder: RunFolder, wait: bool) -> None:
        self.folder = folder
        self.wait = wait
        self.frames: list[Table] = []
        self._started = False

    def records_hook(self, index: int, rate: float | None, last: bool) -> RecordsHook:
        """The ``on_records`` of point ``index`` (``last``: the job's last point)."""
        def keep(result: EngineResult, columns: RecordColumns) -> None:
            self.frames.append(_point_frame(index, rate, result, columns))
            if last:
                self.folder.write_table_in_background(REQUESTS_FILE, Table.concat(self.frames))
                self._started = True
        return keep

    def write(self, rows: list[dict[str, Any]]) -> None:
        """Write ``points.csv`` (``rows``); wait for ``requests.parquet`` unless told not to (``wait``)."""
        if not self.frames:
            return
        try:
            self.folder.write_table(POINTS_FILE, Table.from_rows(rows))
        finally:
            if not self._started:
                self.folder.write_table(REQUESTS_FILE, Table.concat(self.frames))
            elif self.wait:
                self.folder.wait_for_writes()


def run_serve_job(cfg: Config, folder: RunFolder) -> JobResult:
    """``job=serve`` as the harness runs it: :func:`run_serve` returning while ``requests.parquet`` may
    still be written, so that the job's figure (drawn from ``points.csv`` alone:
    ``figures.serving.plot_latency_vs_rate``) is drawn meanwhile; :func:`harness.app.run_job` waits for the
    write before it writes ``summary.json``. The points' frozen objects are left to ``python -m harness``,
    which releases them only when another job follows in the same process (a sweep)."""
    return run_serve(cfg, folder, wait_for_writes=False, release=False)


@dataclass
class _ServedPoints:
    """What :func:`_serve_points` measured: each point's row and validity, the last point's workload
    statistics and columns, and the capacity the points were sized to."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    validities: list[dict[str, Any]] = field(default_factory=list)
    workload_stats: dict[str, Any] = field(default_factory=dict)
    last_columns: RecordColumns | None = None
    capacity: MeasuredCapacity | None = None


def _serve_points(cfg: Config, folder: RunFolder, deployment_factory: Callable[[Any, RunFolder], Deployment],
                  points: PointRequests, files: _PointFiles, served: list[ServedPoint] | None) -> _ServedPoints:
    """Bring the deployment up, run every point on it and write the points' files (also when a point fails).
    Nothing of the deployment outlives this call but what ``served`` receives."""
    done = _ServedPoints()
    with deployment_factory(cfg, folder) as deployment:
        try:
            if cfg.sweep.capacity_fractions:
                done.capacity = measure_capacity(deployment, cfg, folder)
                points = sized_points(cfg, done.capacity)
                deployment.check_health()
            for index, (rate, built) in enumerate(points):
                point = serve_point(cfg, deployment, folder, index, len(points), rate, built,
                                    done.capacity.capacity_rps if done.capacity else None,
                                    on_records=files.records_hook(index, rate, last=index == len(points) - 1))
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
        finally:
            files.write(done.rows)  # what was measured, even when a component died mid-run
    return done


def run_serve(cfg: Config, folder: RunFolder,
              deployment_factory: Callable[[Any, RunFolder], Deployment] = open_deployment,
              point_requests: PointRequests | None = None, served: list[ServedPoint] | None = None,
              wait_for_writes: bool = True, release: bool = True) -> JobResult:
    """Run every point on one deployment and summarise each. ``point_requests`` (from
    :func:`build_point_requests`) are built here, before the deployment, when not given. With
    ``sweep.capacity_fractions`` the deployment's capacity is measured first and the points are sized to it
    (:mod:`harness.host_capacity`). ``served``, when given, receives every :class:`ServedPoint`. With
    ``wait_for_writes=False`` it may return while ``requests.parquet`` is still being written (the caller
    then calls ``folder.wait_for_writes()``); ``points.csv`` is written either way. Each point's objects are
    frozen (:func:`serve_point`); ``release`` hands them back to the collector at the end
    (:func:`harness.collector.release_frozen`), which a caller that goes on to other work needs."""
    check_capacity_sizing(cfg)
    points = build_point_requests(cfg) if point_requests is None else point_requests
    try:
        done = _serve_points(cfg, folder, deployment_factory, points, _PointFiles(folder, wait=wait_for_writes), served)
    finally:
        if release:  # the points' objects, frozen by serve_point, go back to the collector (the cluster's too)
            release_frozen()
    rows, validities = done.rows, done.validities
    published = cfg.logger.name != "none"  # DataFrames (and pandas) only for a tracker to publish
    if len(rows) == 1:
        metrics_out: dict[str, Any] = dict(rows[0])
        validity_out = validities[0]
        tables = {"requests": request_frame(done.last_columns if done.last_columns is not None else ())} if published else {}
    else:
        metrics_out = {"points": rows}
        validity_out = {"valid": all(v["valid"] for v in validities),
                        "reasons": [f"point {i}: {r}" for i, v in enumerate(validities) for r in v["reasons"]],
                        "points": validities}
        tables = {"points": Table.from_rows(rows).to_pandas()} if published else {}
    if done.capacity is not None:
        metrics_out = {**metrics_out, **done.capacity.as_row()}
    return JobResult(metrics=metrics_out, validity=validity_out, workload=done.workload_stats,
                     files={"requests": REQUESTS_FILE, "points": POINTS_FILE}, tables=tables)
