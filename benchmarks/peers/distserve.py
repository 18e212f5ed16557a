"""DistServe's simulator (LLMServe/DistServe ``simdistserve``) against ours: one P/D pair's latencies on the
same requests, and the placement search on the same request set.

Work per request: simdistserve decodes ``output_len`` times after the prefill (``Request.should_finish``:
``counter >= output_lens``), and the prefill's token is not one of them; our simulator emits the first token
from the prefill and decodes ``n - 1`` times. ``same_work`` (default) gives the peer ``n - 1`` so both run the
same iterations; ``as_recorded`` gives it ``n`` (the peer as its README runs a dataset).
"""

from __future__ import annotations

import marshal
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np

from benchmarks.peers.common import Peer, cpu_now_s, record_latencies, run_driver, tpot_ms
from vocab.records import RequestSpec

DRIVER = "simdistserve_driver.py"
MARKERS = ("simdistserve/benchmarks/simulate_dist.py", "simdistserve/base/worker.py")
IMPORT_PROBE = "import os, simdistserve; print(os.path.dirname(os.path.dirname(os.path.abspath(simdistserve.__file__))))"
MODULES = ("simpy", "pandas", "numpy", "tqdm")
PROFILE_FILES = {"distserve/profiler-a100-80g.distserve.json": "simdistserve/estimators/profile_data/"
                 "profiler-a100-80g.distserve.json",
                 "distserve/max_num_tokens.csv": "simdistserve/estimators/profile_data/max_num_tokens.csv"}
OUTPUT_MODES = ("same_work", "as_recorded")
UPSTREAM_MODEL = {"opt_13b": "facebook/opt-13b", "opt_66b": "facebook/opt-66b", "opt_175b": "facebook/opt-175b"}


def peer_output_len(n_out: int, mode: str) -> int:
    """The ``output_len`` simdistserve gets for a request of ``n_out`` output tokens (module docstring)."""
    if mode not in OUTPUT_MODES:
        raise ValueError(f"output mode must be one of {', '.join(OUTPUT_MODES)}, got {mode!r}")
    return max(n_out - 1, 0) if mode == "same_work" else n_out


def simdistserve_workload(specs: Sequence[RequestSpec], mode: str = "same_work") -> list[dict[str, Any]]:
    """simdistserve's custom workload (``--workload FILE --arrival custom``): absolute ``start_time`` in
    seconds (it keeps the gaps, starting the first request at 0), prompt and output lengths."""
    return [{"start_time": s.arrival_s, "prompt_len": s.input_length,
             "output_len": peer_output_len(s.output_length, mode)} for s in specs]


def sharegpt_ds(specs: Sequence[RequestSpec], mode: str = "same_work") -> bytes:
    """A ``sharegpt.ds`` (``marshal``; what ``simdistserve.base.workload.sample_requests`` reads) holding
    exactly ``specs``'s lengths, so its ``random.sample(..., N)`` of ``N = len(specs)`` draws all of them."""
    reqs = [("", s.input_length, peer_output_len(s.output_length, mode)) for s in specs]
    return marshal.dumps({"dataset_name": "sharegpt", "reqs": reqs})


def peer_latencies(out: dict[str, Any], specs: Sequence[RequestSpec], mode: str) -> dict[str, np.ndarray]:
    """The driver's per-request times as TTFT, TPOT, E2E (ms), ordered like ``specs`` (its ``req_id`` is the
    position in the workload)."""
    order = np.argsort(np.asarray(out["req_id"]))
    ttft = np.asarray(out["first_token_latency"], dtype=float)[order]
    e2e = np.asarray(out["total_latency"], dtype=float)[order]
    steps = np.array([peer_output_len(s.output_length, mode) for s in specs], dtype=float)
    return {"request_id": np.array([s.request_id for s in specs]), "ttft_ms": ttft, "e2e_ms": e2e,
            "tpot_ms": tpot_ms(ttft, e2e, steps)}


def pair_overrides(tp_prefill: int, tp_decode: int, max_batched_tokens: int) -> list[str]:
    """Our deployment of simdistserve's ``DisaggCluster`` (one prefill and one decode instance, OPT-13B on
    A100 with DistServe's fitted profile): whole prompts per prefill iteration up to the peer's
    ``prefill_max_tokens`` and no batch-size limit, like the peer."""
    return ["system=distserve", "system.prefill_instances=1", "system.decode_instances=1", "model=opt_13b",
            "hardware=a100_80gb", "workload=sharegpt", "slo=distserve_placement_example",
            "engine.perf_model=distserve", f"engine.prefill.tp={tp_prefill}", f"engine.decode.tp={tp_decode}",
            "engine.kv_link=nvlink_a100", f"engine.max_num_batched_tokens={max_batched_tokens}",
            "engine.max_num_seqs=100000", "engine.progress=false"]


def run_ours(overrides: Sequence[str], specs: Sequence[RequestSpec]) -> tuple[dict[str, np.ndarray], float, float]:
    """Our latencies of ``specs`` on the deployment of ``overrides``, and the wall and CPU seconds of building
    the cluster, simulating and producing the records. The latencies carry ``preemptions`` (a 1-element
    array): our instances preempt when KV runs out, which neither peer models the same way."""
    from harness.studies.variants import compose_variant
    from systems.sim.simulated_deployment import SimulatedDeployment

    cfg = compose_variant(list(overrides))
    cpu0, start = cpu_now_s(), time.perf_counter()
    _, run = SimulatedDeployment(cfg).run(specs)
    records = run.records()
    wall, cpu = time.perf_counter() - start, cpu_now_s() - cpu0
    return {**record_latencies(records), "preemptions": np.array([run.info.get("preemptions", 0)])}, wall, cpu


def run_peer_pair(peer: Peer, specs: Sequence[RequestSpec], tp_prefill: int, tp_decode: int, mode: str,
                  zero_overhead: bool) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """simdistserve's latencies of ``specs`` on one prefill (TP ``tp_prefill``) + one decode instance, and its
    times (``simulate_s`` / ``simulate_cpu_s`` of the call, ``process_*`` of its whole process)."""
    import json

    with tempfile.TemporaryDirectory(prefix="simdistserve_wl_") as tmp:
        workload = Path(tmp) / "workload.json"
        workload.write_text(json.dumps(simdistserve_workload(specs, mode)), encoding="utf-8")
        run = run_driver(peer, DRIVER, {"kind": "latency", "model": UPSTREAM_MODEL["opt_13b"],
                                        "workload": str(workload), "n": len(specs), "tp_prefill": tp_prefill,
                                        "tp_decode": tp_decode, "ttft_ms": 200, "tpot_ms": 100,
                                        "zero_overhead": zero_overhead})
    times = {"simulate_s": run.out["simulate_s"], "simulate_cpu_s": run.out["simulate_cpu_s"],
             "process_wall_s": run.process_wall_s, "process_cpu_s": run.process_cpu_s}
    return peer_latencies(run.out, specs, mode), times


def run_peer_placement(peer: Peer, specs: Sequence[RequestSpec], mode: str, gpus_per_node: int, ttft_ms: float,
                       tpot_ms_: float, max_per_gpu_rate: float, esp: float) -> dict[str, Any]:
    """simdistserve's placement search (its README example's settings) on a dataset of exactly ``specs``."""
    targets = {"ttft_ms": ttft_ms, "tpot_ms": tpot_ms_}
    for key, value in targets.items():
        if value != int(value):
            raise ValueError(f"simdistserve takes whole-millisecond SLO targets (--prefill/decode-target), got "
                             f"{key}={value}")
    with tempfile.TemporaryDirectory(prefix="simdistserve_ds_") as tmp:
        (Path(tmp) / "sharegpt.ds").write_bytes(sharegpt_ds(specs, mode))
        run = run_driver(peer, DRIVER, {"kind": "placement", "model": "opt_13b", "dataset_dir": tmp, "num_node": 1,
                                        "gpus_per_node": gpus_per_node, "high_affinity": False,
                                        "ttft_ms": int(ttft_ms), "tpot_ms": int(tpot_ms_),
                                        "max_per_gpu_rate": max_per_gpu_rate,
                                        "esp": esp, "n": len(specs), "processes": 1})
    return {**run.out, "process_wall_s": run.process_wall_s, "process_cpu_s": run.process_cpu_s,
            "stderr_tail": run.stderr_tail}


def peer_layout(cfg: Sequence[int]) -> tuple[int, int, int, int]:
    """simdistserve's ``(pp_cross, tp_prefill, pp_prefill, tp_decode, pp_decode)`` as ``(prefill tp, prefill pp,
    decode tp, decode pp)`` (``run_binary_search`` runs ``pp_cross * pp`` stages)."""
    pp_cross, tp_p, pp_p, tp_d, pp_d = cfg
    return (tp_p, pp_p * pp_cross, tp_d, pp_d * pp_cross)


def our_layout_rates(table: Any) -> dict[tuple[int, int, int, int], float]:
    """Per-GPU rate of every searched pair in our pair search's ``study.csv`` table (``method=simdistserve``);
    empty for a table without those columns (Algorithm 1's)."""
    cols = {"prefill_tp", "prefill_pp", "decode_tp", "decode_pp", "per_gpu_rate", "status"}
    if table is None or not cols <= set(getattr(table, "columns", ())):
        return {}
    rows = table[table["status"] == "searched"]
    return {(int(r.prefill_tp), int(r.prefill_pp), int(r.decode_tp), int(r.decode_pp)): float(r.per_gpu_rate)
            for r in rows.itertuples()}


def layout_rows(ours: dict[tuple[int, int, int, int], float],
                peer: Sequence[tuple[Sequence[int], float]]) -> list[tuple[str, Optional[float], Optional[float]]]:
    """``(layout, our per-GPU rate, the peer's)`` for every layout either side searched (None: not searched)."""
    theirs = {peer_layout(c): (None if r is None else float(r)) for c, r in peer}
    keys = sorted(set(ours) | set(theirs))
    return [(f"P tp{k[0]}pp{k[1]} + D tp{k[2]}pp{k[3]}", ours.get(k), theirs.get(k)) for k in keys]


def config_label(cfg: Sequence[int]) -> str:
    """simdistserve's ``(pp_cross, tp_prefill, pp_prefill, tp_decode, pp_decode)`` as ``P tpXppY + D tpZppW``."""
    tp_p, pp_p, tp_d, pp_d = peer_layout(cfg)
    return f"P tp{tp_p}pp{pp_p} + D tp{tp_d}pp{pp_d}"
