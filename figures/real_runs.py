"""SLO attainment of the DistServe authors' measured A100 runs (``distserve_opt13b_a100/measured/``), for drawing
the real curve beside a simulated one and quoting it in the report.

Each run's GPUs follow its layout: ``vllm-*`` one TP-1 instance (1 GPU); ``distserve-c21d12-*`` prefill TP 2 +
decode TP 1 PP 2 (4 GPUs); the untagged ``distserve-*`` runs prefill TP 2 + decode TP 1 (3 GPUs), the layout the
replay study infers for them (``harness/studies/real_replay.py``) and the artifact's chatbot layout. Attainment
is per request, TTFT and TPOT both within bounds, by DistServe's definitions (:mod:`workloads.distserve_runs`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from workloads.datadir import resolve_trace_path
from workloads.distserve_runs import parse_run_name, read_measured_run
from workloads.errors import WorkloadError

log = logging.getLogger(__name__)

RUNS_DIR = "distserve_opt13b_a100"
GPUS_OF_LAYOUT = {"vllm": 1, "c21d12": 4, "": 3}
LABEL_OF_LAYOUT = {"vllm": "vLLM (real A100)", "c21d12": "DistServe c21d12 (real A100)",
                   "": "DistServe (real A100)"}


def measured_attainment(ttft_ms: float, tpot_ms: float, data_dir: Optional[str] = None) -> pd.DataFrame:
    """One row per measured run: system label, run, rate, GPUs, per-GPU rate and joint attainment (0-1) at
    TTFT <= ``ttft_ms`` and TPOT <= ``tpot_ms``; empty when the runs are not found (logged)."""
    try:
        folder = resolve_trace_path(RUNS_DIR, data_dir, allow_dir=True) / "measured"
    except WorkloadError as exc:
        log.info("no measured DistServe runs to draw: %s", exc)
        return pd.DataFrame(columns=["system", "run", "rate_rps", "n_gpus", "per_gpu_rate", "slo_attainment"])
    rows = []
    for path in sorted(Path(folder).glob("*.exp")):
        run = parse_run_name(path.name)
        layout = "vllm" if run.system == "vllm" else run.layout
        if layout not in GPUS_OF_LAYOUT:
            continue
        reqs = read_measured_run(path)
        ttft = np.array([r.ttft_ms for r in reqs])
        tpot = np.array([r.tpot_ms for r in reqs])
        n_gpus = GPUS_OF_LAYOUT[layout]
        rows.append({"system": LABEL_OF_LAYOUT[layout], "run": run.name, "rate_rps": run.rate_rps, "n_gpus": n_gpus,
                     "per_gpu_rate": run.rate_rps / n_gpus,
                     "slo_attainment": float(np.mean((ttft <= ttft_ms) & (tpot <= tpot_ms)))})
    return pd.DataFrame(rows).sort_values(["system", "per_gpu_rate", "run"], ignore_index=True)


def highest_rate_meeting(frame: pd.DataFrame, system: str, target: float) -> tuple[Optional[float], Optional[float]]:
    """(the highest per-GPU rate at which ``system``'s measured runs reach ``target``, the lowest rate measured);
    the first is None when no run reaches it."""
    part = frame[frame["system"] == system]
    if part.empty:
        return None, None
    ok = part[part["slo_attainment"] >= target]
    return (float(ok["per_gpu_rate"].max()) if not ok.empty else None), float(part["per_gpu_rate"].min())
