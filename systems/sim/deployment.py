"""``engine=sim``: the simulator behind the same ``Deployment`` interface as the real engines.

Opening the deployment checks the configuration and builds the performance models, so an impossible
deployment fails before any point runs. Each point is one simulation with fresh policies; its
``RequestRecord``s go through the same metrics as a real run. Per-instance load samples go to
``load.csv`` (one row per instance and sampling time, with the point index).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pandas as pd

from harness.engines import EngineResult
from harness.results import RunFolder
from systems.sim.cluster import Cluster, ClusterSetup
from systems.sim.setup import build_perf_models, build_setup, plan_pools
from workloads.base import WorkloadRequests

log = logging.getLogger(__name__)

LOAD_FILE = "load.csv"


class SimDeployment:
    """A simulated cluster; every ``run_point`` simulates one workload from an empty cluster."""

    def __init__(self, cfg: Any, folder: RunFolder) -> None:
        self.cfg = cfg
        # like a real engine, prompts are capped to the context (engine.cap_to_context); otherwise the
        # simulator fails requests longer than model.max_model_len
        self.context_limit = cfg.model.max_model_len if cfg.engine.cap_to_context else None
        self.folder = folder
        self.plans = plan_pools(cfg)
        self.perf = build_perf_models(cfg, self.plans)
        self.kv_block_size = int(getattr(cfg.workload, "block_size", 0) or 512)
        self._points = 0
        self._load_frames: list[pd.DataFrame] = []

    def __enter__(self) -> SimDeployment:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def setup(self) -> ClusterSetup:
        """A fresh cluster set-up (new policy objects) for one simulation."""
        return build_setup(self.cfg, self.plans, self.perf, seed=self.cfg.seed)

    def run_point(self, requests: WorkloadRequests, folder: RunFolder) -> EngineResult:
        start = time.perf_counter()
        setup = self.setup()
        run = Cluster(setup).run(requests.specs, progress=self.cfg.engine.progress)
        records = run.records()
        wall = time.perf_counter() - start
        log.info("simulated %d requests (%.0f s of cluster time, %d events) in %.2f s wall", len(records),
                 run.info["simulated_s"], run.info["events"], wall)
        if run.load_samples:
            frame = pd.DataFrame(run.load_samples)
            frame.insert(0, "point", self._points)
            self._load_frames.append(frame)
            folder.write_table(LOAD_FILE, pd.concat(self._load_frames, ignore_index=True))
        self._points += 1
        return EngineResult(records=records, n_gpus=setup.n_gpus, info={**run.info, "wall_s": wall})

    def check_health(self) -> None:
        return None

    def describe(self) -> dict[str, Any]:
        return {"engine": "sim", "perf_model": self.cfg.engine.perf_model,
                "pools": [{"role": p.role, "count": p.count, "hardware": p.hardware.name, "tp": p.shape.tp,
                           "pp": p.shape.pp, **self.perf[p.role].describe()} for p in self.plans]}
