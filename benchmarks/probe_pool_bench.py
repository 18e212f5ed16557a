"""Times a study's probes in this process against on every CPU (``study.params.parallel=none`` against the default
``auto``, which is joblib on this host's CPUs under Hydra's basic launcher), in one run, and compares the outputs.

``python -m benchmarks.probe_pool_bench [--experiment splitwise_provisioning] [--repeats 3]``

Runs ``python -m harness experiment=<name> study.params.parallel=none`` and ``experiment=<name>`` in turns (the
order flipped from one repeat to the next, so a drift of the machine's speed falls on both), each a whole process
into its own results folder, and prints the median wall seconds of each, the ratio in-process / pooled (above 1:
the pool is faster), and whether the two runs' tables are identical (``study.csv``, ``sensitivity.csv`` and
``requests.parquet`` without wall-clock columns, as :mod:`benchmarks.compare_checkouts` compares them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.compare_checkouts import fingerprints

REPO = Path(__file__).resolve().parents[1]
MODES = {"in-process": ["study.params.parallel=none"], "every CPU": []}


def run(experiment: str, extra: list[str], out: Path) -> float:
    cmd = [sys.executable, "-m", "harness", f"experiment={experiment}", f"results_dir={out}",
           "engine.progress=false", *extra]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.log").write_text(proc.stdout + proc.stderr, encoding="utf-8")
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {proc.returncode}); log: {out / 'bench.log'}")
    return wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", default="splitwise_provisioning")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"{args.experiment}: {len(os.sched_getaffinity(0))} CPUs, {args.repeats} repeats", flush=True)
    walls: dict[str, list[float]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="probe_pool_bench_") as tmp:
        for repeat in range(args.repeats):
            for mode in (list(MODES) if repeat % 2 == 0 else list(reversed(MODES))):
                walls[mode].append(run(args.experiment, MODES[mode], Path(tmp) / f"{mode}_{repeat}"))
                print(f"  repeat {repeat + 1}, {mode}: {walls[mode][-1]:.1f} s", flush=True)
        one, pooled = statistics.median(walls["in-process"]), statistics.median(walls["every CPU"])
        print(f"\nmedian wall: in-process {one:.1f} s, every CPU {pooled:.1f} s: {one / pooled:.2f}x")
        a, b = fingerprints(Path(tmp) / "in-process_0"), fingerprints(Path(tmp) / "every CPU_0")
        differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        print(f"outputs: {len(a)} files fingerprinted; " + ("identical" if not differ else "DIFFER: " + ", ".join(differ)))
    return 0 if not differ else 1


if __name__ == "__main__":
    raise SystemExit(main())
