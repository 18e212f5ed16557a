"""Runs DistServe's simulator in-process; executed by the peer's interpreter, never imported by the suite.

``python simdistserve_driver.py JOB.json OUT.json``. ``JOB["root"]`` is the folder holding the
``simdistserve`` package (a DistServe checkout). Two kinds of job:

- ``latency``: ``simdistserve.benchmarks.simulate_dist.run_experiment`` on a custom workload (a JSON list of
  ``start_time`` s, ``prompt_len``, ``output_len``) with the given parallelism; ``OUT`` holds each request's
  ``first_token_latency``, ``decoding_latency`` and ``total_latency`` (ms, as upstream computes them) and
  the seconds the call took. ``zero_overhead: true`` replaces ``Worker.add_ray_overhead`` with 0 in this
  process only (the checkout is not touched).
- ``placement``: ``simdistserve.benchmarks.parallel_bisect.simulate_bisect_search`` (its placement search)
  with ``DATASET`` pointing at a folder whose ``sharegpt.ds`` the suite wrote, then
  ``simdistserve.simulate.find_best_config``; ``OUT`` holds every configuration's per-GPU rate, the best one
  and the seconds the search took.

It imports nothing from the suite (the peer's interpreter may not have the suite's packages).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import sys
import time
from pathlib import Path


def cpu_s() -> float:
    """CPU seconds of this process and of its finished children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _latency(job: dict) -> dict:
    from simdistserve.base.worker import Worker
    from simdistserve.benchmarks.simulate_dist import parse_args, run_experiment

    if job.get("zero_overhead"):
        Worker.add_ray_overhead = lambda self, sum_of_tokens: 0
    argv = ["--backend", job.get("backend", "distserve"), "--model", job["model"], "--workload", job["workload"],
            "--arrival", "custom", "--N", str(job["n"]), "--tp-prefill", str(job["tp_prefill"]),
            "--pp-prefill", str(job.get("pp_prefill", 1)), "--tp-decode", str(job["tp_decode"]),
            "--pp-decode", str(job.get("pp_decode", 1)), "--prefill-target", str(job["ttft_ms"]),
            "--decode-target", str(job["tpot_ms"]), "--prefill-containment", "90", "--decode-containment", "90",
            "--slas", "[]", "--slo-scales", "[1]"]
    outputs: dict = {}
    cpu0, start = cpu_s(), time.perf_counter()
    run_experiment(parse_args(argv), outputs)
    sim_s, sim_cpu_s = time.perf_counter() - start, cpu_s() - cpu0
    lat = outputs["per_request_latency_df"].sort_index()
    return {"simulate_s": sim_s, "simulate_cpu_s": sim_cpu_s, "req_id": [int(i) for i in lat.index],
            **{col: [float(v) for v in lat[col]] for col in ("first_token_latency", "decoding_latency",
                                                             "total_latency")}}


def _placement(job: dict) -> dict:
    os.environ["DATASET"] = job["dataset_dir"]
    from simdistserve.benchmarks.parallel_bisect import simulate_bisect_search
    from simdistserve.constants import ModelTypes
    from simdistserve.simulate import find_best_config

    cpu0, start = cpu_s(), time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):
        result = simulate_bisect_search(job["num_node"], job["gpus_per_node"],
                                        model_type=ModelTypes.model_str_to_object(job["model"]),
                                        is_dist_high=job["high_affinity"], backend="distserve",
                                        attainment=(job["ttft_ms"], job["tpot_ms"], 90, 90),
                                        max_per_gpu_rate=job["max_per_gpu_rate"], esp=job["esp"], N=job["n"],
                                        max_cpu_count=job["processes"])
    search_s, search_cpu_s = time.perf_counter() - start, cpu_s() - cpu0
    best, rate = find_best_config(result, "distserve")
    return {"search_s": search_s, "search_cpu_s": search_cpu_s, "best_config": list(best) if best else None, "best_per_gpu_rate": rate,
            "configs": [[list(k), v] for k, v in sorted(result.items(), key=lambda kv: kv[0])]}


def main(job_path: str, out_path: str) -> int:
    job = json.loads(Path(job_path).read_text(encoding="utf-8"))
    sys.path.insert(0, str(Path(job["root"]).resolve()))
    out = _latency(job) if job["kind"] == "latency" else _placement(job)
    Path(out_path).write_text(json.dumps(out), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
