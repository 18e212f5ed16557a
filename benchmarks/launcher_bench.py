"""What each sweep launcher costs: the same multirun of N small simulator jobs through every launcher.

Run by hand::

    python -m benchmarks.launcher_bench [--jobs 8] [--repeats 3] [--requests 100]
                                           [--launchers basic,parallel,slurm_local,ray_cluster] [override ...]

Each run is one whole ``python -m harness --multirun ... seed=range(0,N) hydra/launcher=<name>`` process
(interpreter start, Hydra, launching, the N jobs, the sweep report), timed from start to exit into a fresh
results folder (a sweep run again into the same folder would skip its finished jobs). Launchers take turns
within each repeat, so a busy spell on the machine is spread over all of them. ``basic`` is Hydra's own
launcher (the jobs one after another in the calling process); ``parallel`` is joblib on this machine;
``slurm_local`` and ``ray_cluster`` go through the single-node clusters of :mod:`tests.clusters`, which
are brought up when they are not running (default folders and ports) and taken down at the end only if
this run started them. Each job is ``engine=sim`` (DistServe 1P+1D, shared-prefix workload) serving
``--requests`` requests: at the default 100 a job is a fraction of a second of simulation, so the figures
are each launcher's overhead; with ``--requests 20000`` a job alone takes about 9 s (2 s of simulation,
the rest writing its records and figures). Extra overrides are appended to every run.

Prints, per launcher, the median and fastest wall time and the median's ratio to the ``basic`` median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Optional

from tests.clusters import ray_local, slurm_local

REPO_ROOT = Path(__file__).resolve().parents[2]
LAUNCHERS = ("basic", "parallel", "slurm_local", "ray_cluster")
JOB = ["engine=sim", "model=llama3_8b", "hardware=a100_80gb", "workload=shared_prefix", "workload.num_groups=4",
       "workload.arrival.rate_rps=8", "slo=distserve_chatbot_13b", "system=distserve", "engine.progress=false",
       "experiment_name=launcher_bench"]


@contextmanager
def cluster_env(launcher: str) -> Iterator[dict[str, str]]:
    """The environment a run through ``launcher`` needs, bringing its cluster up (and down) when needed."""
    if launcher == "slurm_local":
        result = slurm_local.up()
        try:
            yield result.cluster.client_env()
        finally:
            if result.started:
                slurm_local.down(result.cluster.layout.root)
    elif launcher == "ray_cluster":
        result = ray_local.up()
        try:
            yield result.cluster.client_env()
        finally:
            if result.started:
                ray_local.down(result.cluster.root)
    else:
        yield dict(os.environ)


def time_sweep(launcher: str, jobs: int, extra: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one whole sweep process; RuntimeError when it fails or a job is not ``ok``."""
    with tempfile.TemporaryDirectory(prefix="launcher_bench_") as tmp:
        cmd = [sys.executable, "-m", "harness", "--multirun", *JOB, f"seed=range(0,{jobs})", *extra,
               f"results_dir={os.path.abspath(tmp)}"]
        if launcher != "basic":
            cmd.append(f"hydra/launcher={launcher}")
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        if proc.returncode:
            raise RuntimeError(f"{launcher}: exit status {proc.returncode}:\n{proc.stderr[-3000:]}")
        statuses = [json.loads(p.read_text())["status"] for p in Path(tmp).rglob("summary.json")
                    if ".submitit" not in p.parts]
        if len(statuses) != jobs or set(statuses) != {"ok"}:
            raise RuntimeError(f"{launcher}: expected {jobs} ok jobs, found {statuses}")
    return wall


def run(launchers: list[str], jobs: int, repeats: int, extra: list[str],
        report: Callable[[str], None] = print) -> dict[str, list[float]]:
    """Time every launcher ``repeats`` times, taking turns; the wall times by launcher."""
    times: dict[str, list[float]] = {name: [] for name in launchers}
    with ExitStack() as stack:
        envs = {name: stack.enter_context(cluster_env(name)) for name in launchers}
        for rep in range(repeats):
            for name in launchers:
                wall = time_sweep(name, jobs, extra, envs[name])
                times[name].append(wall)
                report(f"repeat {rep + 1}/{repeats}  {name:<12} {wall:7.1f} s")
    return times


def table(times: dict[str, list[float]], jobs: int) -> str:
    base: Optional[float] = statistics.median(times["basic"]) if times.get("basic") else None
    lines = [f"{'launcher':<12} {'median s':>9} {'min s':>7} {'s/job':>6} {'vs basic':>9}"]
    for name, walls in times.items():
        med = statistics.median(walls)
        ratio = f"{med / base:8.2f}x" if base else "       -"
        lines.append(f"{name:<12} {med:9.1f} {min(walls):7.1f} {med / jobs:6.2f} {ratio:>9}")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=8, help="jobs in the sweep (seed=range(0,N))")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--requests", type=int, default=100,
                        help="requests per job, a multiple of 4 (100: launch overheads dominate; 20000: about "
                             "9 s per job alone, 2 s of it simulation)")
    parser.add_argument("--launchers", default=",".join(LAUNCHERS),
                        help=f"comma-separated subset of {','.join(LAUNCHERS)}")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run")
    args = parser.parse_args(argv)
    launchers = [name for name in args.launchers.split(",") if name]
    unknown = sorted(set(launchers) - set(LAUNCHERS))
    if unknown:
        parser.error(f"unknown launcher(s) {unknown}; choose from {list(LAUNCHERS)}")
    if args.requests < 4 or args.requests % 4:
        parser.error("--requests must be a positive multiple of 4 (4 prefix groups)")
    print(f"{args.jobs} simulator jobs of {args.requests} requests per sweep, {args.repeats} repeat(s), "
          f"{os.cpu_count()} CPU(s), load average {os.getloadavg()[0]:.1f}")
    extra = [f"workload.prompts_per_group={args.requests // 4}", *args.overrides]
    times = run(launchers, args.jobs, args.repeats, extra)
    print(table(times, args.jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
