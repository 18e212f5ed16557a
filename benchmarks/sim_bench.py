"""Speed and scale benchmark of the cluster simulator (issue #4's targets).

Run by hand: ``python -m benchmarks.sim_bench [--skip-scaling] [--repeats 3]``. Each case runs in a
fresh subprocess (so peak memory is that case's alone) and times the whole simulation of a workload:
building the cluster, simulating, and turning every request into a ``RequestRecord`` (with one token
time per output token). Loading and parsing the trace is timed separately.

Cases:
  (a) the Mooncake conversation trace (12,031 requests, mean input 12k tokens) through a 16-instance
      Mooncake deployment (8 prefill + 8 decode nodes of 8 x A800, Conductor, DRAM pool):
      target <= 20 s wall and < 2 GiB peak RSS;
  (b) cost against requests, the trace 1x, 4x and 16x as k copies with disjoint prefixes (a tenant per
      copy), two ways: (b1) on the same 16 instances, copies one after another (k hours at the same
      load): cost per request should stay flat; (b2) time-compressed k times on a cluster k times larger
      (same load per instance): the Conductor looks at every prefill instance per request, so the cost
      per request also grows with the cluster; prints seconds per 1,000 requests;
  (c) the Azure conversation hour (19,366 requests) on a 4-machine DGX-H100 vLLM-style baseline
      (Llama-2-70B, TP 8, splitwise-sim's profile): target <= 4 s;
  (d) determinism: the same case twice gives byte-identical ``requests.parquet``.
The placement-search target (<= 4 s) has its own benchmark: ``python -m benchmarks.placement_bench``.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from vocab.result_files import REQUESTS_FILE

MOONCAKE_16 = ["system=mooncake", "system.prefill_instances=8", "system.decode_instances=8", "system.router=conductor",
               "model=llama3_1_70b", "hardware=a800_80gb", "workload=mooncake_conversation", "slo=mooncake",
               "engine.prefill.tp=8", "engine.decode.tp=8", "engine.kv_link=rdma_800", "engine.layerwise_transfer=true",
               "engine.kv_pool.dram_tokens_per_node=3000000", "engine.kv_pool.remote_link=rdma_800",
               "engine.kv_pool.replication_threshold=4", "engine.progress=false"]
AZURE_H100 = ["system=vllm_baseline", "system.colocated_instances=4", "system.router=least_loaded",
              "model=llama2_70b", "hardware=h100_80gb", "engine.perf_model=splitwise", "engine.colocated.tp=8",
              "workload=azure_conv", "slo=none", "engine.progress=false"]


def _replicate(requests: Any, copies: int, compress: bool) -> Any:
    """``copies`` copies of the workload with disjoint prefixes: arrivals compressed ``copies`` times, or
    each copy after the previous one."""
    span = max(s.arrival_s for s in requests.specs) + 1.0
    specs = []
    for k in range(copies):
        for spec in requests.specs:
            t = spec.arrival_s / copies if compress else spec.arrival_s + k * span
            specs.append(dataclasses.replace(spec, arrival_s=t, tenant=f"copy{k}" if k else ""))
    specs.sort(key=lambda s: (s.arrival_s, s.tenant))
    specs = [dataclasses.replace(s, request_id=i) for i, s in enumerate(specs)]
    return dataclasses.replace(requests, specs=tuple(specs))


def run_case(overrides: list[str], copies: int, parquet: str | None, compress: bool = True) -> dict[str, Any]:
    """One case in this process: returns timings and peak RSS."""
    from harness.results import RunFolder, records_frame
    from harness.studies.simulate import load_requests, point_workload
    from harness.studies.variants import compose_variant
    from systems.sim.simulated_deployment import SimulatedDeployment

    extra = [f"system.prefill_instances={8 * copies}", f"system.decode_instances={8 * copies}"] \
        if "system=mooncake" in overrides else [f"system.colocated_instances={4 * copies}"]
    cfg = compose_variant([*overrides, *(extra if copies > 1 and compress else [])])
    t0 = time.perf_counter()
    requests = load_requests(cfg, point_workload(cfg))
    if copies > 1:
        requests = _replicate(requests, copies, compress)
    t1 = time.perf_counter()
    cluster = SimulatedDeployment(cfg)
    setup, run = cluster.run(requests.specs)
    t2 = time.perf_counter()
    records = run.records()
    t3 = time.perf_counter()
    digest = ""
    if parquet:
        folder = RunFolder(Path(parquet).parent)
        folder.write_table(Path(parquet).name, records_frame(records))
        digest = hashlib.sha256(Path(parquet).read_bytes()).hexdigest()
    n_ok = sum(r.status == "ok" for r in records)
    return {"requests": len(records), "ok": n_ok, "instances": setup.n_gpus // 8,
            "load_s": t1 - t0, "simulate_s": t2 - t1, "records_s": t3 - t2, "total_s": t3 - t1,
            "tokens": sum(r.n_out for r in records), "events": run.info["events"],
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "parquet_sha256": digest}


def _subprocess(overrides: list[str], copies: int = 1, parquet: str | None = None, compress: bool = True) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.sim_bench", "--case", json.dumps(overrides), "--copies", str(copies)]
    if not compress:
        cmd.append("--sequential")
    if parquet:
        cmd += ["--parquet", parquet]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _line(label: str, r: dict[str, Any]) -> str:
    return (f"{label:<34} {r['requests']:>7} req {r['tokens'] / 1e6:>6.1f} M tok  sim {r['simulate_s']:6.2f} s  "
            f"records {r['records_s']:5.2f} s  total {r['total_s']:6.2f} s  (trace load {r['load_s']:.2f} s)  "
            f"peak RSS {r['peak_rss_mib']:6.0f} MiB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-scaling", action="store_true")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--copies", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--parquet", help=argparse.SUPPRESS)
    parser.add_argument("--sequential", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(run_case(json.loads(args.case), args.copies, args.parquet, not args.sequential)))
        return 0
    print("(a) Mooncake conversation trace, 16 instances (8P+8D x 8 A800), fresh process each run")
    runs = [_subprocess(MOONCAKE_16) for _ in range(args.repeats)]
    for r in runs:
        print("   ", _line("mooncake 8P+8D conversation", r))
    med = statistics.median(r["total_s"] for r in runs)
    rss = max(r["peak_rss_mib"] for r in runs)
    print(f"    median total {med:.2f} s (target <= 20 s), peak RSS {rss:.0f} MiB (target < 2048 MiB), "
          f"{runs[0]['ok']}/{runs[0]['requests']} ok")
    if not args.skip_scaling:
        for compress, title in ((False, "(b1) k copies one after another on the same 16 instances"),
                                (True, "(b2) k copies time-compressed k x on k x 16 instances")):
            print(title)
            base = None
            for k in (1, 4, 16):
                r = _subprocess(MOONCAKE_16, copies=k, compress=compress)
                per_k = r["total_s"] / r["requests"] * 1000
                base = base or per_k
                label = f"{k:>2}x trace, {16 * k if compress else 16} instances"
                print("   ", _line(label, r), f" {per_k:.3f} s per 1k req ({per_k / base:.2f}x)")
    print("(c) Azure conversation hour on 4 x DGX-H100 (vLLM-style, Llama-2-70B TP8, splitwise profile)")
    runs = [_subprocess(AZURE_H100) for _ in range(args.repeats)]
    for r in runs:
        print("   ", _line("azure conv 4xH100", r))
    med = statistics.median(r["total_s"] for r in runs)
    print(f"    median total {med:.2f} s (target <= 4 s)")
    print("(d) determinism: the Mooncake case twice, requests.parquet hashed")
    with tempfile.TemporaryDirectory() as tmp:
        a = _subprocess(MOONCAKE_16, parquet=str(Path(tmp) / "a" / REQUESTS_FILE))
        b = _subprocess(MOONCAKE_16, parquet=str(Path(tmp) / "b" / REQUESTS_FILE))
    same = a["parquet_sha256"] == b["parquet_sha256"]
    print(f"    sha256 {a['parquet_sha256'][:16]}... vs {b['parquet_sha256'][:16]}...: {'identical' if same else 'DIFFERENT'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
