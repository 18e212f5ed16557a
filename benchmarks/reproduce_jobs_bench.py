"""Times ``make run``'s simulator presets one at a time against side by side, in one run, and compares outputs.

``python -m benchmarks.reproduce_jobs_bench [--jobs 2] [--repeats 1] [--only a,b] [--full]``

Runs ``python -m harness.reproduce --only <the simulator presets> --jobs 1`` and ``--jobs N`` in turns (the order
flipped from one repeat to the next, so a drift of the machine's speed falls on both), each into its own results
folder, and prints the median wall seconds of each, the ratio one-at-a-time / side-by-side (above 1: side by side
is faster), each preset's own seconds, and whether the two runs' outputs are identical (the sha256 of every job's
``requests.parquet``, ``study.csv`` and ``points.csv`` without wall-clock columns, as
:mod:`benchmarks.compare_checkouts` compares them). The real-process presets are left out: their time is their
measurement, and ``harness.reproduce`` never runs them beside another.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.compare_checkouts import fingerprints
from harness.reproduce import EXPERIMENTS

REPO = Path(__file__).resolve().parents[1]
DONE = re.compile(r"^\s+(?:(?P<name>\S+) )?(?:done|FAILED \(exit \d+\)) in (?P<s>\d+) s$")
START = re.compile(r"^\[\d+/\d+\] (?P<name>[^:]+):")


def simulator_presets(full: bool) -> list[str]:
    return [e.name for e in EXPERIMENTS if not e.real and (full or not e.full_only)]


def run(presets: list[str], jobs: int, out: Path) -> tuple[float, dict[str, float]]:
    """One ``harness.reproduce`` run: its wall seconds and each preset's, from its log. SystemExit on failure."""
    cmd = [sys.executable, "-m", "harness.reproduce", "--only", ",".join(presets), "--jobs", str(jobs),
           "--results-dir", str(out)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    (out / "bench.log").write_text(proc.stdout + proc.stderr, encoding="utf-8")
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {proc.returncode}); log: {out / 'bench.log'}")
    return wall, preset_seconds(proc.stdout + proc.stderr)


def preset_seconds(log_text: str) -> dict[str, float]:
    """Each preset's seconds from ``harness.reproduce``'s log: ``done in N s`` after its ``[i/n] name:`` line one
    at a time, ``name done in N s`` side by side."""
    per_preset: dict[str, float] = {}
    current = None
    for line in log_text.splitlines():
        if m := START.match(line):
            current = m.group("name")
        elif m := DONE.match(line):
            per_preset[m.group("name") or current] = float(m.group("s"))
    return per_preset


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--only", default="", help="comma-separated presets (default: every simulator preset)")
    parser.add_argument("--full", action="store_true", help="the --full set's simulator presets")
    args = parser.parse_args(argv)
    presets = [p for p in args.only.split(",") if p] or simulator_presets(args.full)
    print(f"{len(presets)} simulator presets: {', '.join(presets)}", flush=True)
    walls: dict[int, list[float]] = {1: [], args.jobs: []}
    details: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="reproduce_jobs_") as tmp:
        for repeat in range(args.repeats):
            for jobs in ((1, args.jobs) if repeat % 2 == 0 else (args.jobs, 1)):
                out = Path(tmp) / f"jobs{jobs}_r{repeat}"
                out.mkdir()
                wall, per_preset = run(presets, jobs, out)
                walls[jobs].append(wall)
                details.setdefault(jobs, per_preset)
                print(f"  repeat {repeat + 1}, --jobs {jobs}: {wall:.1f} s", flush=True)
        one, side = statistics.median(walls[1]), statistics.median(walls[args.jobs])
        print(f"\nmedian wall: one at a time {one:.1f} s, {args.jobs} side by side {side:.1f} s: "
              f"{one / side:.2f}x")
        print("per preset (s, first repeat): " + ", ".join(
            f"{p} {details[1].get(p, float('nan')):.0f} / {details[args.jobs].get(p, float('nan')):.0f}"
            for p in presets))
        a, b = fingerprints(Path(tmp) / "jobs1_r0"), fingerprints(Path(tmp) / f"jobs{args.jobs}_r0")
        differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        print(f"outputs: {len(a)} files fingerprinted; " + ("identical" if not differ else
                                                           "DIFFER: " + ", ".join(differ)))
    return 0 if not differ else 1


if __name__ == "__main__":
    raise SystemExit(main())
