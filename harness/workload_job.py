"""``job=workload``: materialise a workload exactly as a run would issue it, and describe it.

Useful to check a trace or generator configuration (request count, offered rate, lengths, the hit
rate an infinite prefix cache would get) before spending machine time on it.
"""

from __future__ import annotations

import dataclasses
import logging

import pandas as pd

from harness.config import Config
from harness.jobs import JobResult
from harness.results import RunFolder
from vocab.result_files import WORKLOAD_FILE
from workloads.registry import build_workload

log = logging.getLogger(__name__)


def run_workload(cfg: Config, folder: RunFolder) -> JobResult:
    requests = build_workload(cfg.workload, data_dir=cfg.data_dir).requests()
    rows = [dataclasses.asdict(spec) for spec in requests.specs]
    for row in rows:
        row["hash_ids"] = list(row["hash_ids"])
    frame = pd.DataFrame(rows)
    folder.write_table(WORKLOAD_FILE, frame)
    schedule = dataclasses.asdict(requests.schedule)
    log.info("workload %s: %d requests, offered rate %.3f req/s, written to %s", cfg.workload.name,
             len(requests.specs), requests.schedule.offered_rate_rps, folder.file(WORKLOAD_FILE))
    return JobResult(
        metrics={"n_requests": len(requests.specs), **{f"schedule_{k}": v for k, v in schedule.items()}},
        workload=dict(requests.stats),
        files={"workload": WORKLOAD_FILE},
        tables={"workload": frame.drop(columns=["hash_ids"])},
    )
