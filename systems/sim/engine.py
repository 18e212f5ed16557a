"""``engine=sim``: the simulator behind the same ``Deployment`` interface as the real engines.

Opening the deployment checks the configuration and builds the performance models
(:class:`~systems.sim.simulated_deployment.SimulatedDeployment`, the path every simulation takes), so an impossible
deployment fails before any point runs. Each point is one simulation with fresh policies; its
``RequestRecord``s go through the same metrics as a real run: the harness reads them as columns gathered
from the simulated requests (:mod:`systems.sim.record_columns`), and the records themselves are made only
when something reads them. Per-instance load samples go to
``load.csv`` (one row per instance and sampling time, with the point index). With
``engine.perf_model=fitted`` a point whose prompts or contexts are longer than the profile measured is
refused before it is simulated (``ConfigError``: the fits would be extrapolated), and every request reaches
the cluster the profile's measured request overhead after its send (HTTP, router, tokenization: time that
adds to the TTFT without occupying an instance); the records keep the send as their clock's start.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from systems.contract import DeploymentConfig, EngineResult, JobFolder
from systems.sim.perf.profile_file import check_coverage
from systems.sim.record_columns import LazyRecords, record_columns
from systems.sim.simulated_deployment import SimulatedDeployment
from systems.topology import topology_of
from vocab.records import RequestRecord
from vocab.result_files import LOAD_FILE
from workloads.base import WorkloadRequests

log = logging.getLogger(__name__)


class SimEngine:
    """A simulated cluster; every ``run_point`` simulates one workload from an empty cluster."""

    def __init__(self, cfg: DeploymentConfig, folder: JobFolder) -> None:
        self.cfg = cfg
        # like a real engine, prompts are capped to the context (engine.cap_to_context); otherwise the
        # simulator fails requests longer than model.max_model_len
        self.context_limit = cfg.model.max_model_len if cfg.engine.cap_to_context else None
        self.folder = folder
        self.deployment = SimulatedDeployment(cfg)
        self.kv_block_size = int(cfg.workload.block_size)
        self._points = 0
        self._load_rows: list[tuple[int, list[dict[str, Any]]]] = []  # (point, its load samples): load.csv

    def __enter__(self) -> SimEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run_point(self, requests: WorkloadRequests, folder: JobFolder) -> EngineResult:
        self.check_coverage(requests)
        start = time.perf_counter()
        overhead = self._request_overhead_s()
        specs = requests.specs
        if overhead > 0:  # each request reaches the engine's queue that much after its send
            specs = tuple(dataclasses.replace(s, arrival_s=s.arrival_s + overhead) for s in specs)
        setup, run = self.deployment.run(specs, progress=self.cfg.engine.progress)
        columns = record_columns(run.requests, shift_s=overhead)  # ... and the client's clock started at the send

        def make_records() -> tuple[RequestRecord, ...]:
            records = run.records()
            if overhead > 0:
                records = tuple(dataclasses.replace(r, arrival_s=r.arrival_s - overhead, sent_s=r.sent_s - overhead)
                                for r in records)
            return records

        records = LazyRecords(len(run.requests), make_records)
        wall = time.perf_counter() - start
        log.info("simulated %d requests (%.0f s of cluster time, %d events) in %.2f s wall", len(records),
                 run.info["simulated_s"], run.info["events"], wall)
        if run.load_samples:
            self._load_rows.append((self._points, run.load_samples))
            folder.write_point_rows(LOAD_FILE, self._load_rows)
        self._points += 1
        return EngineResult(records=records, n_gpus=setup.n_gpus, info={**run.info, "wall_s": wall}, columns=columns)

    def _request_overhead_s(self) -> float:
        """A fitted profile's measured request overhead for this system's request path (0 otherwise)."""
        profile = self.deployment.profile
        if profile is None:
            return 0.0
        return profile.overhead_s(topology_of(self.cfg.system.name).disaggregated)

    def check_coverage(self, requests: WorkloadRequests) -> None:
        """A fitted profile must have measured prompts and decode contexts as long as the workload's."""
        profile = self.deployment.profile
        if profile is None or not requests.specs:
            return
        check_coverage(profile, max(s.input_length for s in requests.specs),
                       max(s.input_length + s.output_length for s in requests.specs),
                       where=f"workload {self.cfg.workload.name}")

    def check_health(self) -> None:
        return None

    def describe(self) -> dict[str, Any]:
        return self.deployment.describe()
