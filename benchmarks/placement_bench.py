"""Speed of the DistServe placement search (``experiment=distserve_placement``, experiment 6).

Run by hand: ``python -m benchmarks.placement_bench [--runs 5] [--process] [override ...]``.

The config is composed once (``compose_variant``, no Hydra app); then the whole job
(``harness.studies.placement_search.run_placement_search``: loading and capping the workload, building
the performance models, every phase search, the end-to-end check, writing ``study.csv`` and
``placement.json`` into a temporary folder) runs ``--runs`` times in this process, and the median and
min wall times are printed with the chosen configuration and its goodput per GPU. ``--process`` also
times one complete ``python -m harness experiment=distserve_placement`` in a fresh interpreter
(imports and Hydra included), which is what DistServe's own ``simdistserve.simulate`` command measures.

No figure of DistServe's simulator is printed here (neither its README's result nor a time measured
elsewhere): ``python -m benchmarks.peer_agreement --only simdistserve`` runs its search and ours on the
same requests and times both in the same run.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

EXPERIMENT = "experiment=distserve_placement"
REPO_ROOT = Path(__file__).resolve().parents[2]


def run_once(cfg: Any) -> tuple[float, Any]:
    """One whole placement-search job into a temporary folder: (wall seconds, JobResult)."""
    from harness.results import RunFolder
    from harness.studies.placement_search import run_placement_search

    with tempfile.TemporaryDirectory(prefix="placement_bench_") as tmp:
        start = time.perf_counter()
        result = run_placement_search(cfg, RunFolder(Path(tmp)))
        wall = time.perf_counter() - start
        for name in result.files.values():
            if not (Path(tmp) / name).is_file():
                raise RuntimeError(f"the job did not write {name}")
    return wall, result


def time_process(overrides: list[str]) -> float:
    """Wall time of one ``python -m harness <experiment> <overrides>`` in a fresh interpreter."""
    with tempfile.TemporaryDirectory(prefix="placement_bench_cli_") as tmp:
        cmd = [sys.executable, "-m", "harness", EXPERIMENT, *overrides, f"results_dir={tmp}"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return wall


def _fmt(value: Any, spec: str = ".3f") -> str:
    return "n/a" if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="searches to time in this process (default 5)")
    parser.add_argument("--process", action="store_true", help="also time one full CLI run in a fresh interpreter")
    parser.add_argument("--verbose", action="store_true", help="log the search's progress")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides, e.g. study.max_requests=600")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(name)s: %(message)s")

    t0 = time.perf_counter()
    from harness.studies.variants import compose_variant

    cfg = compose_variant([EXPERIMENT, *args.overrides])
    compose_s = time.perf_counter() - t0
    walls = []
    result = None
    for i in range(args.runs):
        wall, result = run_once(cfg)
        walls.append(wall)
        print(f"run {i + 1}/{args.runs}: {wall:.3f} s ({result.metrics['n_simulations']} simulations, "
              f"search {result.metrics['search_wall_s']:.3f} s)")
    assert result is not None
    m = result.metrics
    print()
    print(f"placement search, {cfg.model.name} on {cfg.study.params.get('nodes', 1)} x "
          f"{cfg.study.params.get('gpus_per_node', 4)} {cfg.hardware.name}, {cfg.workload.name}, "
          f"{cfg.study.max_requests} requests per simulation, SLO TTFT {cfg.slo.ttft_ms:g} ms / TPOT "
          f"{cfg.slo.tpot_ms:g} ms at {cfg.slo.attainment_target:.0%}")
    print(f"  wall per search: median {statistics.median(walls):.3f} s, min {min(walls):.3f} s, "
          f"max {max(walls):.3f} s over {len(walls)} runs (imports + config composition once: {compose_s:.2f} s)")
    if args.process:
        print(f"  one full CLI run (fresh interpreter, imports, Hydra): {time_process(args.overrides):.2f} s")
    print(f"  chosen: {m['n_prefill']} x prefill tp{m['prefill_tp']}pp{m['prefill_pp']} + {m['n_decode']} x decode "
          f"tp{m['decode_tp']}pp{m['decode_pp']} = {m['n_gpus']} GPUs, {_fmt(m['rate_rps'])} req/s")
    print(f"  goodput per GPU: {_fmt(m['per_gpu_goodput_rps'])} (per-phase searches), "
          f"{_fmt(m['verified_per_gpu_goodput_rps'])} (end-to-end P/D simulation), "
          f"{_fmt(m['ideal_per_gpu_goodput_rps'])} (best layouts, ideal P:D ratio)")
    print("  against DistServe's own search, same requests, same run: python -m benchmarks.peer_agreement "
          "--only simdistserve")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
