"""One simulated load point, shared by every simulator study: the workload at a rate or speed
(:func:`workloads.load_point.workload_at`, rates taken as Poisson rates), the deployment
(:class:`systems.sim.simulated_deployment.SimulatedDeployment`, the same path ``engine=sim`` serving jobs take), and the
records summarised with the suite's metrics."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

from harness.config import Config
from harness.metrics import summarize
from harness.prompts import fit_to_context
from harness.slo import SLOConfig
from systems.sim.simulated_deployment import SimulatedDeployment
from vocab.records import RequestRecord
from workloads.base import WorkloadRequests
from workloads.config import WorkloadConfig
from workloads.load_point import workload_at
from workloads.registry import build_workload


@dataclass
class SimPoint:
    """Records and summary of one simulation."""

    records: tuple[RequestRecord, ...]
    metrics: dict[str, Any]
    info: dict[str, Any]
    load_samples: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0


def point_workload(cfg: Config, rate_rps: Optional[float] = None, speedup: Optional[float] = None,
                   max_requests: Optional[int] = None) -> WorkloadConfig:
    """``cfg.workload`` at a study's load point: a Poisson ``rate_rps`` or a trace ``speedup``, keeping the
    first ``max_requests``."""
    return workload_at(cfg.workload, rate_rps=rate_rps, speedup=speedup, max_requests=max_requests, as_poisson=True)


def load_requests(cfg: Config, wcfg: WorkloadConfig) -> WorkloadRequests:
    """The requests of ``wcfg``, capped to the model's context like a real engine would."""
    requests = build_workload(wcfg, data_dir=cfg.data_dir).requests()
    if cfg.engine.cap_to_context:
        requests, _ = fit_to_context(requests, cfg.model.max_model_len)
    return requests


def simulate(deployment: SimulatedDeployment, requests: WorkloadRequests, slo: Optional[SLOConfig] = None,
             keep_load: bool = False, **setup_changes: Any) -> SimPoint:
    """Simulate ``requests`` on a fresh copy of ``deployment`` and summarise them against ``slo``."""
    start = time.perf_counter()
    setup, run = deployment.run(requests.specs, **setup_changes)
    records = run.records()
    metrics = summarize(records, slo or deployment.cfg.slo, n_gpus=setup.n_gpus)
    return SimPoint(records, metrics, run.info, run.load_samples if keep_load else [], time.perf_counter() - start)
