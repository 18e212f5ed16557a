"""One simulated load point, shared by every simulator study: the workload at a rate or speed
(:func:`workloads.load_point.workload_at`, rates taken as Poisson rates), the deployment
(:class:`systems.sim.simulated_deployment.SimulatedDeployment`, the same path ``engine=sim`` serving jobs take), and the
records summarised with the suite's metrics. The summary is computed from columns gathered straight from the
simulated requests (:func:`systems.sim.record_columns.record_columns`, value for value the records' own), and
the records themselves are made only when a study reads them."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from harness.config import Config
from harness.metrics import RecordColumns, extract_columns, summarize
from harness.prompts import fit_to_context
from harness.slo import SLOConfig
from systems.sim.record_columns import LazyRecords, record_columns
from systems.sim.simulated_deployment import SimulatedDeployment
from systems.sim.stop_rule import StopRule
from vocab.records import RequestRecord
from workloads.base import WorkloadRequests
from workloads.config import WorkloadConfig
from workloads.load_point import workload_at
from workloads.registry import build_workload


@dataclass
class SimPoint:
    """Records (made on first use), their columns and the summary of one simulation."""

    records: Sequence[RequestRecord]
    metrics: dict[str, Any]
    info: dict[str, Any]
    load_samples: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0
    columns: Optional[RecordColumns] = None


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
             keep_load: bool = False, stop: Optional[StopRule] = None, **setup_changes: Any) -> SimPoint:
    """Simulate ``requests`` on a fresh copy of ``deployment`` and summarise them against ``slo``; ``stop`` may end
    the run early (then ``info["stopped_early"]`` says why and the records are partial)."""
    start = time.perf_counter()
    setup, run = deployment.run(requests.specs, stop=stop, **setup_changes)
    columns = extract_columns(record_columns(run.requests))
    metrics = summarize(columns, slo or deployment.cfg.slo, n_gpus=setup.n_gpus)
    return SimPoint(LazyRecords(len(run.requests), run.records), metrics, run.info,
                    run.load_samples if keep_load else [], time.perf_counter() - start, columns)
