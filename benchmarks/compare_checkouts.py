"""Times the tasks a user waits for in two checkouts of this project, in one run, and compares their outputs.

``python -m benchmarks.compare_checkouts --reference PATH [--variant PATH] [--tasks presets sweep full million]
[--repeats 3] [--reference-env KEY=VALUE ...] [--variant-env KEY=VALUE ...]``

Each side is a checkout with its own virtualenv (``PATH/.venv``, after ``make setup native`` there): the
reference (for example the commit before a change) and the variant (this checkout by default). Every task runs
as its own processes, started from the checkout's root with its virtualenv's Python, the two sides taking turns
within a repeat and the order flipped from one repeat to the next (reference first, then variant first ...), so
a drift of the machine's speed falls on both. The two sides may be one checkout run two ways:
``--reference . --reference-env DISAGG_SIM_NATIVE=0`` times the simulator's Python sources against its compiled
core. Tasks:

- ``presets``: every simulator preset of the default ``make run`` set (``harness.reproduce``; the real-process
  presets are left out: their time is their measurement), one ``python -m harness experiment=NAME`` each;
- ``sweep``: a 20-job ``--multirun`` sweep on the simulator, the four designs at five rates (Hydra's basic
  launcher, the jobs one after another in one process);
- ``full``: the ``--full`` preset ``mooncake_capacity_rate`` (the paper-scale capacity search);
- ``reproduce_full`` (not in the default set): the simulator presets of ``python -m harness.reproduce --full``
  (every preset but the real-process ones, as the checkout lists them) in one ``harness.reproduce`` run as a user
  starts it (its default ``--jobs``: side by side), with each preset's own wall seconds from its output;
- ``million``: 1,000,000 requests through 1,024 instances of the vLLM baseline, the simulator's scale case
  (``sim_scale_bench --case``: simulate and build the records), with its peak RSS;
- ``single`` (not in the default set): one short serving run as a user types it, the Azure conversation hour on
  4 DGX-H100 (``benchmarks.sim_bench``'s case, the one ``benchmarks.process_time_bench`` times): a process of a
  few seconds, where start-up and writing the results weigh most.

For each task it prints the median wall seconds of each side, the ratio reference / variant (above 1: the
variant is faster), each repeat's own ratio, and the median CPU seconds of the processes. For the presets it
prints each preset's own line too. It then compares the outputs of the two sides' first repeats: the sha256 of
every job's ``requests.parquet`` and of its ``study.csv`` and ``points.csv`` without the columns that hold
wall-clock times (names ending in ``wall_s``); a line per file that differs, or "identical".
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

SWEEP = ["-m", "experiment_name=bench_sweep", "system=vllm_baseline,distserve,mooncake,splitwise",
         "workload.arrival.rate_rps=1,2,4,6,8"]
FULL_PRESET = "mooncake_capacity_rate"
MILLION = ["--case", "baseline", "--instances", "1024", "--case-requests", "1000000", "--records", "columns",
           "--drop-records"]
SCALE_BENCH_MODULES = ("benchmarks.sim_scale_bench", "harness.bench.sim_scale_bench")  # new layout, old layout
TASKS = ("presets", "sweep", "full", "million")
SINGLE = ["system=vllm_baseline", "system.colocated_instances=4", "system.router=least_loaded", "model=llama2_70b",
          "hardware=h100_80gb", "engine.perf_model=splitwise", "engine.colocated.tp=8", "workload=azure_conv",
          "slo=none", "engine.progress=false"]
FINGERPRINTED = ("requests.parquet", "study.csv", "points.csv", "sensitivity.csv")
PRESET_DONE = re.compile(r"^\s+(\w+) done in (\d+) s$")  # harness.reproduce's line for a preset run side by side
WALL_CLOCK_SUFFIX = "wall_s"


@dataclass(frozen=True)
class Checkout:
    """A checkout of this project and the Python of its virtualenv."""

    root: Path
    python: Path
    env: tuple[tuple[str, str], ...] = ()

    @classmethod
    def at(cls, root: str, env: Sequence[str] = ()) -> Checkout:
        path = Path(root).resolve()
        python = path / ".venv" / "bin" / "python"
        if not (path / "harness" / "__main__.py").is_file():
            raise SystemExit(f"{root}: not a checkout of this project (no harness/__main__.py)")
        if not python.is_file():
            raise SystemExit(f"{root}: no virtualenv at {python} (run 'make setup native' in that checkout)")
        pairs = []
        for item in env:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise SystemExit(f"--reference-env/--variant-env: expected KEY=VALUE, got {item!r}")
            pairs.append((key, value))
        return cls(path, python, tuple(pairs))

    def module_exists(self, module: str) -> bool:
        return self.root.joinpath(*module.split(".")).with_suffix(".py").is_file()


@dataclass
class Timing:
    """One timed run: wall and CPU seconds of its processes, and what it reported."""

    wall_s: float
    cpu_s: float
    detail: dict[str, float] = field(default_factory=dict)


def run_timed(checkout: Checkout, args: Sequence[str], log: Path) -> tuple[Timing, str]:
    """Run ``python ARGS`` in ``checkout``; its wall and CPU seconds and its stdout. SystemExit when it fails."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")} | dict(checkout.env)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([str(checkout.python), *args], cwd=checkout.root, env=env, capture_output=True, text=True,
                          check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"$ {' '.join(args)}  (in {checkout.root}, {wall:.1f} s, exit {proc.returncode})\n{proc.stdout}\n"
                 f"{proc.stderr}\n")
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed in {checkout.root} (exit {proc.returncode}); log: {log}\n"
                         f"{proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timing(wall, cpu), proc.stdout


def _listed_by(checkout: Checkout, condition: str) -> list[str]:
    """The names of the checkout's ``harness.reproduce`` experiments ``e`` for which ``condition`` holds."""
    code = (f"import json; from harness.reproduce import EXPERIMENTS as E; "
            f"print(json.dumps([e.name for e in E if {condition}]))")
    out = subprocess.run([str(checkout.python), "-c", code], cwd=checkout.root, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def presets_of(checkout: Checkout) -> list[str]:
    """The simulator presets of the default ``make run`` set, as the checkout's ``harness.reproduce`` lists them."""
    return _listed_by(checkout, "not e.full_only and not e.name.endswith('_cpu')")


def task_presets(checkout: Checkout, out: Path, presets: Sequence[str]) -> Timing:
    total = Timing(0.0, 0.0)
    for name in presets:
        timing, _ = run_timed(checkout, ["-m", "harness", f"experiment={name}", f"results_dir={out}",
                                         "engine.progress=false"], out / "log.txt")
        total.wall_s += timing.wall_s
        total.cpu_s += timing.cpu_s
        total.detail[name] = timing.wall_s
    return total


def task_sweep(checkout: Checkout, out: Path) -> Timing:
    timing, _ = run_timed(checkout, ["-m", "harness", *SWEEP, f"results_dir={out}", "engine.progress=false"],
                          out / "log.txt")
    return timing


def task_full(checkout: Checkout, out: Path) -> Timing:
    timing, _ = run_timed(checkout, ["-m", "harness", f"experiment={FULL_PRESET}", f"results_dir={out}",
                                     "engine.progress=false"], out / "log.txt")
    return timing


def simulator_presets_of(checkout: Checkout) -> list[str]:
    """Every preset of the checkout's ``harness.reproduce --full`` but the real-process ones."""
    return _listed_by(checkout, "not getattr(e, 'real', e.name.endswith('_cpu'))")


def task_reproduce_full(checkout: Checkout, out: Path) -> Timing:
    presets = simulator_presets_of(checkout)
    timing, _ = run_timed(checkout, ["-m", "harness.reproduce", "--full", "--only", ",".join(presets),
                                     "--results-dir", str(out)], out / "log.txt")
    for line in (out / "log.txt").read_text(encoding="utf-8").splitlines():  # its log lines (stderr) are there
        done = PRESET_DONE.match(line)
        if done:
            timing.detail[done.group(1)] = float(done.group(2))
    return timing


def task_single(checkout: Checkout, out: Path) -> Timing:
    timing, _ = run_timed(checkout, ["-m", "harness", *SINGLE, f"results_dir={out}"], out / "log.txt")
    return timing


def task_million(checkout: Checkout, out: Path) -> Timing:
    module = next((m for m in SCALE_BENCH_MODULES if checkout.module_exists(m)), None)
    if module is None:
        raise SystemExit(f"{checkout.root}: has none of {', '.join(SCALE_BENCH_MODULES)}")
    timing, stdout = run_timed(checkout, ["-m", module, *MILLION], out / "log.txt")
    result = json.loads(stdout.strip().splitlines()[-1])
    timing.detail = {"simulate_and_records_s": float(result["total_s"]), "peak_rss_mib": float(result["peak_rss_mib"])}
    return timing


def csv_without_wall_clock(path: Path) -> bytes:
    """The bytes of ``path`` (a CSV) rewritten without the columns whose name ends in ``wall_s``."""
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    keep = [i for i, name in enumerate(rows[0]) if not name.endswith(WALL_CLOCK_SUFFIX)] if rows else []
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for row in rows:
        writer.writerow([row[i] for i in keep if i < len(row)])
    return buf.getvalue().encode("utf-8")


def fingerprints(results: Path) -> dict[str, str]:
    """sha256 of every fingerprinted file under ``results`` (CSV files without their wall-clock columns), by the
    path below ``results`` with the run's timestamp folder left out."""
    found = {}
    for path in sorted(results.rglob("*")):
        if path.name not in FINGERPRINTED or not path.is_file():
            continue
        data = path.read_bytes() if path.suffix == ".parquet" else csv_without_wall_clock(path)
        parts = [p for p in path.relative_to(results).parts if not p[:4].isdigit()]  # the run folders' timestamps
        key = "/".join(parts)
        n = sum(1 for k in found if k == key or k.startswith(key + " #"))  # two runs of one experiment: in time order
        found[key if n == 0 else f"{key} #{n + 1}"] = hashlib.sha256(data).hexdigest()
    return found


def median_line(label: str, ref: list[Timing], var: list[Timing], value: Callable[[Timing], float]) -> str:
    r, v = statistics.median(value(t) for t in ref), statistics.median(value(t) for t in var)
    pairs = [value(a) / value(b) for a, b in zip(ref, var, strict=True) if value(b) > 0]
    spread = f"; repeat by repeat {min(pairs):.2f}x to {max(pairs):.2f}x" if len(pairs) > 1 else ""
    return f"{label:<34} reference {r:9.2f}  variant {v:9.2f}  reference / variant {r / v:5.2f}x{spread}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare_checkouts",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--reference", required=True, help="the checkout to compare against (its root)")
    parser.add_argument("--variant", default=".", help="the checkout measured (default: this one)")
    parser.add_argument("--tasks", nargs="+", choices=[*TASKS, "single", "reproduce_full"], default=list(TASKS))
    parser.add_argument("--presets", nargs="*", help="the presets of the presets task (default: make run's simulator "
                                                     "presets, as the variant lists them)")
    parser.add_argument("--reference-env", nargs="*", default=[], metavar="KEY=VALUE",
                        help="environment of the reference's processes (for example DISAGG_SIM_NATIVE=0 with "
                             "--reference . : this checkout from its Python sources against its compiled core)")
    parser.add_argument("--variant-env", nargs="*", default=[], metavar="KEY=VALUE",
                        help="environment of the variant's processes")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", metavar="DIR", help="keep every run's results and logs under DIR")
    args = parser.parse_args(argv)
    sides = {"reference": Checkout.at(args.reference, args.reference_env),
             "variant": Checkout.at(args.variant, args.variant_env)}
    presets = args.presets if args.presets else presets_of(sides["variant"])
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="compare-checkouts-"))
    tasks: dict[str, Callable[[Checkout, Path], Timing]] = {
        "presets": lambda c, o: task_presets(c, o, presets), "sweep": task_sweep, "full": task_full,
        "million": task_million, "single": task_single, "reproduce_full": task_reproduce_full}
    print(f"reference {sides['reference'].root} {args.reference_env}, variant {sides['variant'].root} "
          f"{args.variant_env}; {args.repeats} repeats; "
          f"runs under {work}", flush=True)
    failures = 0
    for task in args.tasks:
        timings: dict[str, list[Timing]] = {"reference": [], "variant": []}
        for repeat in range(args.repeats):
            order = ("reference", "variant") if repeat % 2 == 0 else ("variant", "reference")
            for side in order:
                out = work / task / side / str(repeat)
                shutil.rmtree(out, ignore_errors=True)
                timings[side].append(tasks[task](sides[side], out))
                print(f"  {task} repeat {repeat + 1} {side}: {timings[side][-1].wall_s:.1f} s", flush=True)
        ref, var = timings["reference"], timings["variant"]
        print(f"{task}: median of {args.repeats}", flush=True)
        print("  " + median_line("wall s", ref, var, lambda t: t.wall_s))
        print("  " + median_line("cpu s", ref, var, lambda t: t.cpu_s))
        for key in ref[0].detail:
            print("  " + median_line(key, ref, var, lambda t, k=key: t.detail[k]))
        if task != "million":
            a, b = fingerprints(work / task / "reference" / "0"), fingerprints(work / task / "variant" / "0")
            differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
            if differ:
                failures += 1
                for name in differ:
                    print(f"  output differs: {name} (reference {a.get(name, 'missing')[:12]}, "
                          f"variant {b.get(name, 'missing')[:12]})")
            else:
                print(f"  outputs identical: {len(a)} files")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
