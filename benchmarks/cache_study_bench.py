"""Benchmark of the prefix-cache replay on the Mooncake conversation trace (Mooncake FAST'25 §5.3).

Run by hand: ``python -m benchmarks.cache_study_bench [--trace PATH] [--repeats 5]``.

It times
  (a) cold: the first 18-point sweep (LRU/LFU/LengthAware x 1k/10k/30k/50k/100k/infinite blocks) in a
      fresh subprocess, once with an empty numba cache (compile included) and once with the on-disk
      numba cache (cache load included);
  (b) warm: median and min of ``--repeats`` sweeps in this process;
  (c) the reference: a pure-Python OrderedDict LRU for the 5 finite capacities, with the ratio
      reference / ours per LRU point (and a check that both give the same hits);
  (d) one global-vs-local run per routing policy (8 instances x 10k blocks, LRU),
and prints the 18 block and token hit rates.
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
from collections import OrderedDict
from pathlib import Path
from typing import Optional

import numpy as np

TRACE_NAME = "conversation_trace.jsonl"
CAPACITIES: tuple[Optional[int], ...] = (1_000, 10_000, 30_000, 50_000, 100_000, None)
BLOCK_SIZE = 512
REPO_ROOT = Path(__file__).resolve().parents[2]


def find_trace(explicit: Optional[str]) -> Path:
    """The trace file: ``--trace``, else $DATA_DIR, ./data/mooncake_fast25, ../shared/traces/mooncake_fast25
    (relative to the working directory, then to the repository root)."""
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise FileNotFoundError(f"trace not found: {path}")
        return path
    candidates: list[Path] = []
    if os.environ.get("DATA_DIR"):
        data_dir = Path(os.environ["DATA_DIR"])
        candidates += [data_dir / "mooncake_fast25" / TRACE_NAME, data_dir / TRACE_NAME]
    for base in (Path.cwd(), REPO_ROOT):
        candidates += [
            base / "data" / "mooncake_fast25" / TRACE_NAME,
            base.parent / "shared" / "traces" / "mooncake_fast25" / TRACE_NAME,
        ]
    for path in candidates:
        if path.is_file():
            return path
    tried = "\n  ".join(str(p) for p in candidates)
    raise FileNotFoundError(
        f"{TRACE_NAME} not found; tried:\n  {tried}\n"
        "It is published in github.com/kvcache-ai/Mooncake at FAST25-release/traces/."
    )


def load_trace(path: Path) -> tuple[list[list[int]], np.ndarray]:
    """(hash_ids per request, input_length per request), in file (timestamp) order."""
    hash_ids: list[list[int]] = []
    lengths: list[int] = []
    with path.open() as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                hash_ids.append(row["hash_ids"])
                lengths.append(int(row["input_length"]))
    return hash_ids, np.asarray(lengths, dtype=np.int64)


def timed_sweep(dense: np.ndarray, offsets: np.ndarray) -> tuple[float, dict[str, float], dict]:
    """One 18-point sweep: (total seconds, seconds per point, hits per point)."""
    from systems.kvcache import EvictionPolicy, replay_prefix_hits

    per_point: dict[str, float] = {}
    hits: dict = {}
    t_total = time.perf_counter()
    for policy in EvictionPolicy:
        for cap in CAPACITIES:
            t0 = time.perf_counter()
            hits[(policy, cap)] = replay_prefix_hits(dense, offsets, cap, policy)
            per_point[f"{policy}/{cap}"] = time.perf_counter() - t0
    return time.perf_counter() - t_total, per_point, hits


def reference_lru(blocks: list[list[int]], capacity: int) -> int:
    """Pure-Python OrderedDict LRU with the same semantics: total prefix hit blocks."""
    cache: OrderedDict[int, None] = OrderedDict()
    total = 0
    for req in blocks:
        k = 0
        n = len(req)
        while k < n and req[k] in cache:
            k += 1
        total += k
        for b in req:
            if b in cache:
                cache.move_to_end(b)
            else:
                if len(cache) >= capacity:
                    cache.popitem(last=False)
                cache[b] = None
    return total


def _child(trace: str) -> None:
    """Fresh-process cold measurement; prints one JSON line."""
    t0 = time.perf_counter()
    from systems.kvcache import flatten_blocks

    t_import = time.perf_counter() - t0
    t1 = time.perf_counter()
    hash_ids, _ = load_trace(Path(trace))
    dense, offsets = flatten_blocks(hash_ids)
    t_load = time.perf_counter() - t1
    t_sweep, _, _ = timed_sweep(dense, offsets)
    print(json.dumps({"import_s": t_import, "load_s": t_load, "first_sweep_s": t_sweep}))


def _run_child(trace: Path, numba_cache_dir: Optional[str]) -> dict:
    env = dict(os.environ)
    if numba_cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = numba_cache_dir
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.cache_study_bench", "--_child", str(trace)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_wall_s"] = time.perf_counter() - t0
    return out


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=None, help="conversation_trace.jsonl (default: searched)")
    parser.add_argument("--repeats", type=int, default=5, help="warm sweeps to time")
    parser.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._child:
        _child(args._child)
        return

    trace = find_trace(args.trace)
    print(f"trace: {trace}")

    # (a) cold, in fresh processes
    with tempfile.TemporaryDirectory(prefix="numba_cold_") as empty_cache:
        cold_compile = _run_child(trace, empty_cache)

    from systems.kvcache import (
        EvictionPolicy,
        ReplayRouting,
        flatten_blocks,
        hit_rates,
        replay_global_vs_local,
    )

    hash_ids, input_lengths = load_trace(trace)
    t0 = time.perf_counter()
    dense, offsets = flatten_blocks(hash_ids)
    t_flatten = time.perf_counter() - t0
    n_blocks = np.diff(offsets)
    timed_sweep(dense, offsets)  # warm-up: fills the on-disk numba cache if it was empty
    cold_disk = _run_child(trace, None)

    print(
        f"requests: {len(hash_ids)}  block references: {dense.shape[0]}  "
        f"distinct blocks: {int(dense.max()) + 1}  flatten_blocks: {t_flatten:.3f} s"
    )
    print(f"cpus: {os.cpu_count()}  python {sys.version.split()[0]}")
    print()
    print("(a) cold: first 18-point sweep in a fresh process")
    for label, res in (("empty numba cache (compile)", cold_compile), ("on-disk numba cache", cold_disk)):
        print(
            f"  {label:28s} first sweep {res['first_sweep_s']:.3f} s | import {res['import_s']:.3f} s, "
            f"trace load+flatten {res['load_s']:.3f} s, whole process {res['process_wall_s']:.3f} s"
        )

    # (b) warm
    totals: list[float] = []
    per_point_runs: list[dict[str, float]] = []
    hits: dict = {}
    for _ in range(max(1, args.repeats)):
        total, per_point, hits = timed_sweep(dense, offsets)
        totals.append(total)
        per_point_runs.append(per_point)
    point_median = {k: statistics.median(run[k] for run in per_point_runs) for k in per_point_runs[0]}
    print()
    print(f"(b) warm 18-point sweep, {len(totals)} repeats")
    print(f"  median {statistics.median(totals):.3f} s   min {min(totals):.3f} s")

    # (c) reference
    blocks = [list(map(int, dense[offsets[r] : offsets[r + 1]])) for r in range(len(hash_ids))]
    print()
    print("(c) reference: pure-Python OrderedDict LRU (min of repeats) vs ours (median)")
    print(f"  {'capacity':>9s} {'reference s':>12s} {'ours s':>9s} {'ratio':>8s}  same hits")
    for cap in CAPACITIES:
        if cap is None:
            continue
        ref_times = []
        ref_total = 0
        for _ in range(max(1, min(args.repeats, 3))):
            t0 = time.perf_counter()
            ref_total = reference_lru(blocks, cap)
            ref_times.append(time.perf_counter() - t0)
        ours = point_median[f"{EvictionPolicy.LRU}/{cap}"]
        same = ref_total == int(hits[(EvictionPolicy.LRU, cap)].sum())
        print(f"  {cap:>9d} {min(ref_times):>12.4f} {ours:>9.4f} {min(ref_times) / ours:>7.1f}x  {same}")

    # hit-rate tables
    cap_names = ["inf" if c is None else f"{c // 1000}k" for c in CAPACITIES]
    for title, idx in (("block hit rate", 0), ("token hit rate", 1)):
        print()
        print(f"{title} (prefix hits / all, {BLOCK_SIZE}-token blocks)")
        print(f"  {'policy':13s}" + "".join(f"{n:>8s}" for n in cap_names))
        for policy in EvictionPolicy:
            rates = [
                hit_rates(hits[(policy, c)], n_blocks, input_lengths, BLOCK_SIZE)[idx] for c in CAPACITIES
            ]
            print(f"  {policy.value:13s}" + "".join(f"{r:>8.4f}" for r in rates))

    print()
    print("per-point warm median (ms)")
    print(f"  {'policy':13s}" + "".join(f"{n:>8s}" for n in cap_names))
    for policy in EvictionPolicy:
        row = [point_median[f"{policy}/{c}"] * 1e3 for c in CAPACITIES]
        print(f"  {policy.value:13s}" + "".join(f"{t:>8.1f}" for t in row))

    # (d) global vs local
    n_inst, cap_inst = 8, 10_000
    print()
    print(f"(d) global vs local: {n_inst} instances x {cap_inst} blocks, LRU, warm")
    print(
        f"  {'routing':12s} {'time s':>8s} {'local blk':>10s} {'global blk':>11s} {'local tok':>10s} {'global tok':>11s}"
    )
    tiny_d, tiny_o = flatten_blocks([[0, 1], [0, 2]])
    for routing in ReplayRouting:
        replay_global_vs_local(tiny_d, tiny_o, 2, 1, EvictionPolicy.LRU, routing)  # load the kernel
        t0 = time.perf_counter()
        res = replay_global_vs_local(dense, offsets, n_inst, cap_inst, EvictionPolicy.LRU, routing, seed=0)
        elapsed = time.perf_counter() - t0
        lb, lt = hit_rates(res.local_hits, n_blocks, input_lengths, BLOCK_SIZE)
        gb, gt = hit_rates(res.global_hits, n_blocks, input_lengths, BLOCK_SIZE)
        print(f"  {routing.value:12s} {elapsed:>8.3f} {lb:>10.4f} {gb:>11.4f} {lt:>10.4f} {gt:>11.4f}")


if __name__ == "__main__":
    main()
