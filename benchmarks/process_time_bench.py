"""A user's time is the whole process: ours against splitwise-sim's on the Azure conversation hour (run by hand).

``python -m benchmarks.process_time_bench [--repeats 5] [--peer-python PY] [--splitwise-sim DIR] [--skip-peer]``

In one run, taking turns ``--repeats`` times, it times three processes from exec to exit:

(a) ours, as shipped: ``python -m harness <case (c) of benchmarks.sim_bench>``, the Azure conversation hour
    (19,366 requests) on a vLLM-style baseline of 4 DGX-H100 (Llama-2-70B, TP 8, splitwise-sim's profile):
    Hydra composition, trace loading, simulation, ``requests.parquet``, ``points.csv``, ``load.csv``, the
    summary and the figure (``figures/latency_vs_rate.png`` and its CSV), into a temporary results folder;
(a') ours, the same work as the peer: the same command with ``figures=false``, everything of (a) but the
    figure (the peer draws none; ``python -m figures`` can draw it later from the tables);
(b) splitwise-sim's whole process on the same requests (the ones our run simulates, capped to the model's
    context, written to its trace format) on 4 DGX-H100 with its own Llama-2-70B profile, through
    :mod:`benchmarks.peers.splitwise_sim_driver` (its ``run.run_simulation`` on the config its ``run.py``
    composes; :func:`benchmarks.peers.splitwise.run_peer`). Its process also writes its own result CSVs.
    The two differ in the scheduler (ours least loaded, as case (c); the peer round robin), not in the work.
    The peer inherits this process's environment, with the two allocation defaults that importing
    :mod:`harness` sets (they leave its time unchanged: 11.5 s either way when measured).

Before the timed turns each side runs once, untimed, so that both are timed as a user's second run finds
them: Python's bytecode caches written (``PYTHONDONTWRITEBYTECODE`` is cleared for the children: with it, a
module changed since its cache was last written is compiled again in every timed run) and the
files in the page cache.
It prints each run, the medians (wall and CPU) of each side, ours against the 3 s target and the ratio
peer / ours (target >= 8) for both of ours, each labelled, with the median of each turn's ratio beside it
(the two runs of a turn are timed one after the other, so a drift in the machine's speed over the run
moves both), then where our process spends its time: one more
run of (a) with timers around its stages (``--breakdown-child``: the same ``python -m harness`` in a fresh
interpreter, its functions wrapped), so the breakdown's total is a little above a plain run's. ``--no-figures-only`` times (a') alone of
ours. A peer that is not installed is reported with how to
install it (``docs/peers.md``) and skipped. The machine should be otherwise idle: both sides are timed in
the same run, but a busy machine slows them unequally.
"""

from __future__ import annotations

import argparse
import atexit
import functools
import importlib
import json
import os
import resource
import runpy
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.sim_bench import AZURE_H100

TARGET_S = 3.0
TARGET_RATIO = 8.0
MACHINES, HARDWARE, MODEL = 4, "h100_80gb", "llama2_70b"  # case (c), in splitwise-sim's terms
DEFAULT_PEER_PYTHON = "/tmp/peers-venv/bin/python"  # docs/peers.md's install location
DEFAULT_SPLITWISE_SIM = "/tmp/peers/splitwise-sim"
EXEC_TIME_ENV = "PROCESS_TIME_BENCH_EXEC"  # wall clock (time.time) just before the child was started
IN_A_THREAD = ", in a thread"  # the label of a stage run in another thread than the main one
OUT_ENV = "PROCESS_TIME_BENCH_OUT"  # where the breakdown child writes its stage times (JSON)
OURS_SHIPPED = "ours, as shipped (with figures)"
OURS_SAME_WORK = "ours, same work as the peer (figures off; the peer draws none)"
SHORT = {OURS_SHIPPED: "ours (figures)", OURS_SAME_WORK: "ours (figures=false)"}

# the stages of the breakdown: (label, module, attribute). Each stage counts its own time: a wrapped call
# made inside another one is taken out of the outer one (so "job" is what the job does outside the others).
STAGES = (
    ("hydra", "hydra.main", "_run_hydra"),
    ("job", "harness.app", "run_job"),
    ("trace load", "harness.serve_job", "plan_serve"),
    ("cap to context, hit rate", "harness.serve_job", "_prepare"),
    ("simulate", "systems.sim.engine", "SimEngine.run_point"),
    ("records (as columns)", "systems.sim.engine", "record_columns"),
    ("records (as columns)", "systems.sim.deployment_setup", "SimRun.records"),  # (made only if something reads them)
    ("summary, validity", "harness.serve_job", "extract_columns"),
    ("summary, validity", "harness.serve_job", "summarize"),
    ("summary, validity", "harness.serve_job", "assess_validity"),
    ("summary, validity", "harness.serve_job", "request_frame"),
    ("tables (parquet, csv)", "harness.serve_job", "_point_frame"),
    ("tables (parquet, csv)", "harness.results", "RunFolder.write_table"),
    ("figures", "figures.render", "render_job"),
)


class StageTimer:
    """Wall and CPU seconds per stage, each call's nested stages taken out of it. Each thread has its own
    stack of open calls and counts its own CPU time; a stage run in another thread than the main one (a
    background write) is counted apart, as overlapping the main thread's stages."""

    def __init__(self) -> None:
        self.totals: dict[str, list[float]] = {}
        self._open = threading.local()  # .stack: per open call of this thread, [nested wall, nested cpu]

    def add(self, label: str, wall: float, cpu: float) -> None:
        total = self.totals.setdefault(label, [0.0, 0.0])
        total[0] += wall
        total[1] += cpu

    def _stack(self) -> list[list[float]]:
        if not hasattr(self._open, "stack"):
            self._open.stack = []
        return self._open.stack

    def wrap(self, owner: Any, attr: str, label: str) -> None:
        fn = getattr(owner, attr)

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            stack = self._stack()
            wall0, cpu0 = _thread_clocks()
            stack.append([0.0, 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                wall, cpu = (x - y for x, y in zip(_thread_clocks(), (wall0, cpu0), strict=True))
                nested = stack.pop()
                in_main = threading.current_thread() is threading.main_thread()
                self.add(label if in_main else f"{label}{IN_A_THREAD}", wall - nested[0], cpu - nested[1])
                if stack:
                    stack[-1][0] += wall
                    stack[-1][1] += cpu

        setattr(owner, attr, timed)


def _clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _thread_clocks() -> tuple[float, float]:
    return time.perf_counter(), time.thread_time()


def breakdown_child(argv: list[str]) -> int:
    """Run ``python -m harness argv`` in this process with timers around its stages; write them as JSON to
    ``$PROCESS_TIME_BENCH_OUT`` at exit."""
    started = time.time()
    wall0, cpu0 = _clocks()
    timer = StageTimer()
    out = Path(os.environ[OUT_ENV])
    exec_time = float(os.environ.get(EXEC_TIME_ENV, started))

    def report() -> None:
        wall1, cpu1 = _clocks()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        out.write_text(json.dumps({"stages": timer.totals, "start_s": started - exec_time,
                                   "in_python_wall_s": wall1 - wall0, "in_python_cpu_s": cpu1 - cpu0,
                                   "cpu_s": usage.ru_utime + usage.ru_stime}), encoding="utf-8")

    atexit.register(report)
    import harness.__main__  # noqa: F401 - the imports python -m harness makes before it starts Hydra
    timer.add("imports", *(x - y for x, y in zip(_clocks(), (wall0, cpu0), strict=True)))
    for label, module, attr in STAGES:
        try:
            owner: Any = importlib.import_module(module)
            *path, name = attr.split(".")
            for part in path:
                owner = getattr(owner, part)
            timer.wrap(owner, name, label)
        except (ImportError, AttributeError) as exc:  # a renamed stage: left out of the breakdown
            print(f"process_time_bench: stage {label!r} not timed ({exc})", file=sys.stderr)
    sys.argv = ["harness", *argv]
    runpy.run_module("harness", run_name="__main__", alter_sys=True)
    return 0


def _timed_process(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, float]:
    """Wall seconds from exec to exit, and the CPU seconds, of one child process (it must succeed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, **(env or {}), EXEC_TIME_ENV: repr(time.time())}
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed with exit code {proc.returncode}:\n{proc.stderr[-3000:]}")
    return {"wall_s": wall, "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)}


def ours_command(results_dir: Path, overrides: list[str]) -> list[str]:
    return [sys.executable, "-m", "harness", *overrides, f"results_dir={results_dir}"]


def run_ours(tmp: Path, index: int, overrides: list[str], figures: bool = True) -> dict[str, float]:
    """Our whole process once, into its own results folder (``figures=false`` unless ``figures``)."""
    tag = "" if figures else "_nofig"
    return _timed_process(ours_command(tmp / f"ours{index}{tag}", [*overrides, *([] if figures else ["figures=false"])]))


def run_peer_once(peer: Any, specs: Any) -> dict[str, float]:
    """splitwise-sim's whole process once on ``specs`` (the driver's interpreter start to exit)."""
    from benchmarks.peers import splitwise as sw

    _, times = sw.run_peer(peer, specs, MACHINES, HARDWARE, MODEL)
    if times["completed"] != len(specs):
        raise RuntimeError(f"splitwise-sim finished {times['completed']} of {len(specs)} requests")
    return {"wall_s": times["process_wall_s"], "cpu_s": times["process_cpu_s"], "simulate_s": times["simulate_s"]}


def our_requests(overrides: list[str]) -> Any:
    """The specs our run simulates (the workload capped to the model's context, as ``engine=sim`` does)."""
    from harness.studies.simulate import load_requests, point_workload
    from harness.studies.variants import compose_variant

    cfg = compose_variant(overrides)
    return load_requests(cfg, point_workload(cfg)).specs


def breakdown(tmp: Path, overrides: list[str]) -> dict[str, Any]:
    """One instrumented run of ours: its stage times and its exec-to-exit wall time."""
    out = tmp / "breakdown.json"
    cmd = [sys.executable, "-m", "benchmarks.process_time_bench", "--breakdown-child", "--",
           *overrides, f"results_dir={tmp / 'breakdown'}"]
    whole = _timed_process(cmd, {OUT_ENV: str(out)})
    return {**json.loads(out.read_text(encoding="utf-8")), "process": whole}


def _median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _fastest(runs: list[dict[str, float]]) -> str:
    """The least wall and CPU seconds of the runs (a busy machine slows some runs, never speeds any)."""
    return f"{min(r['wall_s'] for r in runs):.2f} s wall, {min(r['cpu_s'] for r in runs):.2f} s CPU"


def print_breakdown(b: dict[str, Any]) -> None:
    stages = dict(b["stages"])
    process = b["process"]
    nan = float("nan")
    rows: list[tuple[str, float, float]] = [("interpreter start", b["start_s"], nan)]
    labels = {"imports": "imports (python -m harness)", "hydra": "Hydra: compose (once), job folder, logging",
              "job": "rest of the job (config.yaml, summary.json, job modules' imports ...)"}
    for label in ("imports", "hydra", *dict.fromkeys(s[0] for s in STAGES if s[0] not in ("hydra", "job")), "job"):
        if label in stages:
            rows.append((labels.get(label, label), *stages[label]))
    threads = [(label, *times) for label, times in stages.items() if label.endswith(IN_A_THREAD)]
    rows.append(("exit (after the job, interpreter shutdown)", process["wall_s"] - b["start_s"] - b["in_python_wall_s"],
                 nan))
    print(f"  our process, stage by stage (one more run, with timers: {process['wall_s']:.2f} s wall, "
          f"{process['cpu_s']:.2f} s CPU):")
    for label, wall, cpu in rows:
        cpu_text = "" if cpu != cpu else f"  {cpu:6.2f} s CPU"
        print(f"    {label:<70} {wall:6.2f} s wall{cpu_text}")
    for label, wall, cpu in threads:  # not in the process's sequence: they overlap the stages above
        print(f"    {label:<70} {wall:6.2f} s wall  {cpu:6.2f} s CPU (overlaps the stages above)")


def print_ours(label: str, ours: list[dict[str, float]], theirs: list[dict[str, float]]) -> None:
    """Medians of one of our sides, against the 3 s target and, when timed, against the peer."""
    ours_wall, ours_cpu = _median(ours, "wall_s"), _median(ours, "cpu_s")
    print(f"  {label}: median {ours_wall:.2f} s wall, {ours_cpu:.2f} s CPU (fastest {_fastest(ours)}); target <= "
          f"{TARGET_S:g} s: {'met' if ours_wall <= TARGET_S else 'NOT met'} ({ours_wall / TARGET_S:.2f} x the target)")
    if theirs:
        ratio = _median(theirs, "wall_s") / ours_wall
        print(f"    peer / {SHORT[label]}: {ratio:.1f} x wall, {_median(theirs, 'cpu_s') / ours_cpu:.1f} x CPU (target "
              f">= {TARGET_RATIO:g} x): {'met' if ratio >= TARGET_RATIO else 'NOT met'}")
        paired = paired_ratios(ours, theirs)
        print(f"    the same, turn by turn (each turn's peer / ours, a machine whose speed drifts between turns moves "
              f"both sides of a turn alike): median {statistics.median(paired):.1f} x wall (turns: "
              f"{', '.join(f'{r:.1f}' for r in paired)})")


def paired_ratios(ours: list[dict[str, float]], theirs: list[dict[str, float]]) -> list[float]:
    """peer / ours wall time of each turn (the two runs of a turn are timed one just after the other)."""
    return [t["wall_s"] / o["wall_s"] for o, t in zip(ours, theirs, strict=True)]


def find_splitwise(args: argparse.Namespace) -> Any:
    from benchmarks.peer_agreement import find_peer
    from benchmarks.peers import splitwise as sw

    root = args.splitwise_sim or os.environ.get("SPLITWISE_SIM_DIR") or (
        DEFAULT_SPLITWISE_SIM if Path(DEFAULT_SPLITWISE_SIM).is_dir() else None)
    return find_peer("splitwise-sim", root, "SPLITWISE_SIM_DIR", sw.MARKERS, sw.MODULES, args.peer_python)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--breakdown-child"]:
        return breakdown_child(argv[2:] if argv[1:2] == ["--"] else argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs of each side, alternating (median reported)")
    default_python = os.environ.get("PEER_PYTHON") or (
        DEFAULT_PEER_PYTHON if Path(DEFAULT_PEER_PYTHON).is_file() else sys.executable)
    parser.add_argument("--peer-python", default=default_python,
                        help=f"splitwise-sim's interpreter (default $PEER_PYTHON, else {DEFAULT_PEER_PYTHON} when present)")
    parser.add_argument("--splitwise-sim", help=f"splitwise-sim checkout (default $SPLITWISE_SIM_DIR, else "
                                                f"{DEFAULT_SPLITWISE_SIM} when present)")
    parser.add_argument("--skip-peer", action="store_true", help="time ours only")
    parser.add_argument("--skip-breakdown", action="store_true", help="no instrumented run of ours")
    parser.add_argument("--no-figures-only", action="store_true",
                        help="time ours with figures=false only (not also as shipped, with figures)")
    args = parser.parse_args(argv)
    overrides = list(AZURE_H100)
    print(f"Azure conversation hour, 4 x DGX-H100 vLLM-style baseline: python -m harness {' '.join(overrides)}")
    peer = None
    if not args.skip_peer:
        peer = find_splitwise(args)
        if not peer.found:
            from benchmarks.peer_agreement import INSTALL

            print(f"  splitwise-sim: {peer.reason}; only ours is timed. To install it beside the suite (never into "
                  f"its environment): {INSTALL['splitwise-sim']}. See docs/peers.md.")
            peer = None
    specs = our_requests(overrides) if peer is not None else None
    ours_sides = ([] if args.no_figures_only else [(OURS_SHIPPED, True)]) + [(OURS_SAME_WORK, False)]
    runs: dict[str, list[dict[str, float]]] = {label: [] for label, _ in ours_sides}
    theirs: list[dict[str, float]] = []
    # both sides as a user's second run finds them: Python's bytecode caches written (a shell that sets
    # PYTHONDONTWRITEBYTECODE would leave every changed module to be compiled again in every timed run)
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
        print("  PYTHONDONTWRITEBYTECODE cleared for the timed processes (Python's default: bytecode cached)")
    with tempfile.TemporaryDirectory(prefix="process_time_bench_") as tmp_name:
        tmp = Path(tmp_name)
        print("  warm-up: one untimed run of each side (bytecode caches, the page cache)", flush=True)
        run_ours(tmp, -1, overrides, figures=not args.no_figures_only)
        if peer is not None:
            run_peer_once(peer, specs)
        for i in range(args.repeats):
            sides: list[tuple[str, Callable[[], dict[str, float]], list[dict[str, float]]]] = [
                (label, functools.partial(run_ours, tmp, i, overrides, figures), runs[label])
                for label, figures in ours_sides]
            if peer is not None:
                sides.append(("splitwise-sim", functools.partial(run_peer_once, peer, specs), theirs))
            sides = sides[i % len(sides):] + sides[:i % len(sides)]  # take turns at going first
            for name, run, side_runs in sides:
                r = run()
                side_runs.append(r)
                extra = f" (its run_simulation {r['simulate_s']:.2f} s)" if "simulate_s" in r else ""
                print(f"  run {i + 1}/{args.repeats} {SHORT.get(name, name):<24} {r['wall_s']:6.2f} s wall "
                      f"{r['cpu_s']:6.2f} s CPU{extra}", flush=True)
        if theirs:
            print(f"  splitwise-sim ({len(specs)} requests, draws no figures): median {_median(theirs, 'wall_s'):.2f} s "
                  f"wall, {_median(theirs, 'cpu_s'):.2f} s CPU (fastest {_fastest(theirs)})")
        for label, _ in ours_sides:
            print_ours(label, runs[label], theirs)
        if not args.skip_breakdown:
            print_breakdown(breakdown(tmp, overrides))
    return 0


if __name__ == "__main__":
    sys.exit(main())
