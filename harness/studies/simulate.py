"""One simulated load point, shared by every simulator study: compose the workload at a rate or speed,
run the cluster, and summarise the records with the suite's metrics."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from harness.metrics import summarize
from harness.prompts import fit_to_context
from harness.records import RequestRecord
from harness.slo import SLOConfig
from systems.sim.cluster import Cluster, ClusterSetup
from systems.sim.setup import build_perf_models, build_setup, plan_pools
from workloads.base import WorkloadRequests
from workloads.registry import build_workload, to_workload_config


@dataclass
class SimPoint:
    """Records and summary of one simulation."""

    records: tuple[RequestRecord, ...]
    metrics: dict[str, Any]
    info: dict[str, Any]
    load_samples: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0


class SimCluster:
    """A composed config's deployment, checked and with its performance models built once."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.plans = plan_pools(cfg)
        self.perf = build_perf_models(cfg, self.plans)

    @property
    def n_gpus(self) -> int:
        return sum(p.count * p.shape.n_gpus for p in self.plans)

    def setup(self, **changes: Any) -> ClusterSetup:
        setup = build_setup(self.cfg, self.plans, self.perf, seed=self.cfg.seed)
        return dataclasses.replace(setup, **changes) if changes else setup


def point_workload(cfg: Any, rate_rps: Optional[float] = None, speedup: Optional[float] = None,
                   max_requests: Optional[int] = None) -> Any:
    """``cfg.workload`` at a Poisson ``rate_rps`` or a trace ``speedup``, keeping the first ``max_requests``."""
    wcfg = to_workload_config(cfg.workload)
    arrival = wcfg.arrival
    if rate_rps is not None:
        kind = arrival.kind if arrival.kind in ("poisson", "gamma") else "poisson"
        arrival = dataclasses.replace(arrival, kind=kind, rate_rps=float(rate_rps))
    if speedup is not None:
        arrival = dataclasses.replace(arrival, time_scale=arrival.time_scale / float(speedup))
    changes: dict[str, Any] = {"arrival": arrival}
    if max_requests is not None:
        changes["max_requests"] = min(max_requests, wcfg.max_requests or max_requests)
    return dataclasses.replace(wcfg, **changes)


def load_requests(cfg: Any, wcfg: Any) -> WorkloadRequests:
    """The requests of ``wcfg``, capped to the model's context like a real engine would."""
    requests = build_workload(wcfg, data_dir=cfg.data_dir).requests()
    if getattr(cfg.engine, "cap_to_context", True):
        requests, _ = fit_to_context(requests, cfg.model.max_model_len)
    return requests


def simulate(cluster: SimCluster, requests: WorkloadRequests, slo: Optional[SLOConfig] = None,
             keep_load: bool = False, **setup_changes: Any) -> SimPoint:
    """Simulate ``requests`` on a fresh copy of ``cluster`` and summarise them against ``slo``."""
    start = time.perf_counter()
    setup = cluster.setup(**setup_changes)
    run = Cluster(setup).run(requests.specs)
    records = run.records()
    metrics = summarize(records, slo or cluster.cfg.slo, n_gpus=setup.n_gpus)
    return SimPoint(records, metrics, run.info, run.load_samples if keep_load else [], time.perf_counter() - start)
