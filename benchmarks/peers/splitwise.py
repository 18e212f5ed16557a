"""splitwise-sim (Mutinifni/splitwise-sim) against ours: a vLLM-style baseline of DGX machines on the same
trace requests.

The peer runs ``start_state=baseline`` (one ``SplitwiseInstance`` per machine, TP 8, ``max_batch_size``
512, ``max_batch_tokens`` 2048) with ``performance_model=db`` (its ``data/perf_model.csv``) and the
``round_robin`` scheduler; ours runs ``system=vllm_baseline`` with ``engine.perf_model=splitwise`` (the same
CSV), round robin, 2048 batched tokens and 512 sequences. Its TBT column divides by ``token_size``; the
comparison recomputes TPOT from its response time and TTFT over ``token_size - 1`` decode steps (its token
task runs ``token_size - 1`` iterations, ``Request`` in its ``request.py``), as ours.
"""

from __future__ import annotations

import csv
import io
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.peers.common import Peer, run_driver, tpot_ms
from vocab.records import RequestSpec

DRIVER = "splitwise_sim_driver.py"
MARKERS = ("performance_model.py", "run.py", "configs/config.yaml", "data/perf_model.csv")
MODULES = ("hydra", "omegaconf", "pandas", "numpy", "scipy", "networkx", "hydra_plugins.hydra_ray_launcher")
PROFILE_FILES = {"splitwise_sim/perf_model.csv": "data/perf_model.csv"}
TRACE_COLUMNS = ("request_id", "request_type", "application_id", "arrival_timestamp", "batch_size", "prompt_size",
                 "token_size")
HARDWARE = {"h100_80gb": ("dgx-h100", 1), "a100_80gb": ("dgx-a100", 0)}  # our name: (SKU, index in its cluster)
ARRIVAL_OFFSET_S = 1.0  # TraceSimulator.schedule runs a 0-delay event at once, i.e. before its start state
#                         has placed any instance ("No instances available"): every arrival is shifted by this
MODEL = {"llama2_70b": ("llama2-70b", "llama2-70b-fp16"), "bloom_176b": ("bloom-176b", "bloom-176b-fp16")}


def trace_csv(specs: Sequence[RequestSpec]) -> str:
    """``specs`` in splitwise-sim's trace format (README, "Request Traces"): type 2 (generative LLM),
    application 0, arrival in seconds, shifted so that the first is ``ARRIVAL_OFFSET_S`` (latencies count
    from each request's own arrival, so the shift changes none)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(TRACE_COLUMNS)
    t0 = min((s.arrival_s for s in specs), default=0.0)
    for s in specs:
        writer.writerow([s.request_id, 2, 0, repr(float(s.arrival_s - t0 + ARRIVAL_OFFSET_S)), 1, s.input_length,
                         s.output_length])
    return out.getvalue()


def peer_overrides(machines: int, hardware: str, model: str) -> list[str]:
    """Hydra overrides of splitwise-sim's ``configs/config.yaml`` for the baseline of ``machines`` DGX machines."""
    sku, index = HARDWARE[hardware]
    arch, size = MODEL[model]
    cluster = "dgx-h100" if sku == "dgx-h100" else "dgx-a100"
    counts = [f"cluster.servers.{i}.count={machines if i == index else 0}" for i in (0, 1)]
    return [f"cluster={cluster}", *counts, "start_state=baseline", "performance_model=db",
            "applications.0.scheduler=round_robin", f"applications.0.model_architecture={arch}",
            f"applications.0.model_size={size}", "seed=0"]


def our_overrides(machines: int, hardware: str, model: str, workload: str) -> list[str]:
    """Our deployment of the same baseline."""
    return ["system=vllm_baseline", f"system.colocated_instances={machines}", "system.router=round_robin",
            f"model={model}", f"hardware={hardware}", f"workload={workload}", "slo=none",
            "engine.perf_model=splitwise", "engine.colocated.tp=8", "engine.max_num_batched_tokens=2048",
            "engine.max_num_seqs=512", "engine.progress=false"]


def peer_latencies(rows: Sequence[dict[str, float]]) -> dict[str, np.ndarray]:
    """TTFT, TPOT and E2E (ms) from the rows of its ``detailed/0.csv`` (seconds), ordered by request id."""
    rows = sorted(rows, key=lambda r: r["request_ids"])
    ttft = np.array([r["ttft_times"] * 1e3 for r in rows])
    e2e = np.array([r["response_times"] * 1e3 for r in rows])
    steps = np.array([r["token_sizes"] - 1 for r in rows])
    return {"request_id": np.array([int(r["request_ids"]) for r in rows]), "ttft_ms": ttft, "e2e_ms": e2e,
            "tpot_ms": tpot_ms(ttft, e2e, steps)}


def run_peer(peer: Peer, specs: Sequence[RequestSpec], machines: int, hardware: str,
             model: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """splitwise-sim's latencies of ``specs`` and its times."""
    with tempfile.TemporaryDirectory(prefix="splitwise_sim_") as tmp:
        trace = Path(tmp) / "trace.csv"
        trace.write_text(trace_csv(specs), encoding="utf-8")
        run = run_driver(peer, DRIVER, {"trace": str(trace), "overrides": peer_overrides(machines, hardware, model),
                                        "workdir": str(Path(tmp) / "out")})
    times = {"simulate_s": run.out["simulate_s"], "simulate_cpu_s": run.out["simulate_cpu_s"],
             "process_wall_s": run.process_wall_s, "process_cpu_s": run.process_cpu_s,
             "completed": len(run.out["requests"])}
    return peer_latencies(run.out["requests"]), times
