"""``job=serve``: replay a workload against an engine, then write records, metrics and validity."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from harness.engines import Engine, build_engine
from harness.jobs import JobResult
from harness.metrics import request_frame, summarize
from harness.results import REQUESTS_FILE, RunFolder
from harness.validity import assess_validity
from workloads.registry import build_workload

log = logging.getLogger(__name__)


def run_serve(cfg: Any, folder: RunFolder, engine_factory: Callable[[Any], Engine] = build_engine) -> JobResult:
    """Build the workload, run it on the configured engine and summarise the records."""
    requests = build_workload(cfg.workload, data_dir=cfg.data_dir).requests()
    log.info("workload %s: %d requests, offered rate %.3f req/s", cfg.workload.name,
             len(requests.specs), requests.schedule.offered_rate_rps)
    engine = engine_factory(cfg)
    result = engine.run(requests, folder)
    if len(result.records) != len(requests.specs):
        raise RuntimeError(f"engine returned {len(result.records)} records for {len(requests.specs)} issued requests")
    folder.write_records(result.records)
    metrics = summarize(result.records, cfg.slo, n_gpus=result.n_gpus)
    validity = assess_validity(result.records, metrics, cfg.validity, result.invalid_reasons)
    workload_stats = dict(requests.stats)
    workload_stats["offered_rate_rps"] = requests.schedule.offered_rate_rps
    return JobResult(
        metrics={**metrics, **{f"engine_{k}": v for k, v in result.info.items()}},
        validity=validity,
        workload=workload_stats,
        files={"requests": REQUESTS_FILE},
        tables={"requests": request_frame(result.records)},
    )
