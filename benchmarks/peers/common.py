"""What every peer comparison shares: finding a peer, running its driver, and comparing latencies.

Latencies are compared on one definition, computed on both sides from per-request times: TTFT and E2E
from the request's arrival, TPOT = (E2E - TTFT) / decode steps (requests with no decode step have none).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from vocab.records import RequestRecord, RequestStatus

DRIVERS = Path(__file__).resolve().parent
METRICS = ("ttft_ms", "tpot_ms", "e2e_ms")
STATS = ("mean", "p50", "p90", "p99")


@dataclass(frozen=True)
class Peer:
    """A peer simulator found on this machine (``root`` set) or not (``reason`` says why)."""

    name: str
    root: Optional[Path]
    python: str
    reason: str = ""

    @property
    def found(self) -> bool:
        return self.root is not None


def locate_peer(name: str, path: Optional[str], env_var: str, markers: Sequence[str], python: str,
                import_probe: Optional[str] = None) -> Peer:
    """The checkout of peer ``name``: ``path``, else ``$env_var``, else (with ``import_probe``, a Python
    expression printing the checkout folder) wherever ``python`` imports it from. A folder without every
    file of ``markers`` does not count."""
    root = path or os.environ.get(env_var) or None
    how = "--" + name + " / $" + env_var
    if root is None and import_probe:
        probe = subprocess.run([python, "-c", import_probe], capture_output=True, text=True, check=False)
        if probe.returncode == 0 and probe.stdout.strip():
            root, how = probe.stdout.strip().splitlines()[-1], f"importable by {python}"
    if root is None:
        return Peer(name, None, python, f"not installed: no {how} given" +
                    (f" and not importable by {python}" if import_probe else ""))
    missing = [m for m in markers if not (Path(root) / m).is_file()]
    if missing:
        return Peer(name, None, python, f"{root} ({how}) is not a {name} checkout: no {', '.join(missing)}")
    return Peer(name, Path(root).resolve(), python)


def missing_modules(python: str, modules: Sequence[str]) -> list[str]:
    """The modules of ``modules`` that ``python`` cannot import (all of them if it does not run)."""
    code = ("import importlib.util, sys\n"
            f"print(' '.join(m for m in {list(modules)!r} if importlib.util.find_spec(m) is None))")
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False, timeout=60)
    except OSError:
        return list(modules)
    if out.returncode:
        return list(modules)
    return out.stdout.split()


@dataclass(frozen=True)
class DriverRun:
    """What a driver wrote, and the wall and CPU seconds of its whole process (interpreter start included)."""

    out: dict[str, Any]
    process_wall_s: float
    process_cpu_s: float
    stderr_tail: str = ""


def run_driver(peer: Peer, driver: str, job: Mapping[str, Any], timeout_s: float = 3600.0) -> DriverRun:
    """Run ``driver`` (a file beside this module) with ``job`` under the peer's interpreter."""
    with tempfile.TemporaryDirectory(prefix="peer_job_") as tmp:
        job_path, out_path = Path(tmp) / "job.json", Path(tmp) / "out.json"
        job_path.write_text(json.dumps({"root": str(peer.root), **job}), encoding="utf-8")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run([peer.python, str(DRIVERS / driver), str(job_path), str(out_path)],
                              capture_output=True, text=True, check=False, timeout=timeout_s)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode:
            raise RuntimeError(f"{peer.name} ({driver}) failed with exit code {proc.returncode}:\n"
                               f"{proc.stderr[-3000:]}")
        out = json.loads(out_path.read_text(encoding="utf-8"))
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return DriverRun(out, wall, cpu, proc.stderr[-2000:])


def record_latencies(records: Sequence[RequestRecord]) -> dict[str, np.ndarray]:
    """TTFT, TPOT and E2E (ms) of our finished requests, ordered by request id (TPOT NaN without a decode step)."""
    ok = sorted((r for r in records if r.status == RequestStatus.OK), key=lambda r: r.request_id)
    ttft = np.array([(r.first_token_s - r.arrival_s) * 1e3 for r in ok])
    e2e = np.array([(r.finish_s - r.arrival_s) * 1e3 for r in ok])
    steps = np.array([r.n_out - 1 for r in ok], dtype=float)
    return {"request_id": np.array([r.request_id for r in ok]), "ttft_ms": ttft, "e2e_ms": e2e,
            "tpot_ms": tpot_ms(ttft, e2e, steps)}


def tpot_ms(ttft_ms: np.ndarray, e2e_ms: np.ndarray, decode_steps: np.ndarray) -> np.ndarray:
    """(E2E - TTFT) / decode steps, NaN where there is no decode step."""
    steps = np.asarray(decode_steps, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(steps > 0, (np.asarray(e2e_ms) - np.asarray(ttft_ms)) / np.where(steps > 0, steps, 1), np.nan)


def latency_stats(values: np.ndarray) -> dict[str, float]:
    """Mean and P50/P90/P99 of the finite values (NaN when there are none)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not v.size:
        return dict.fromkeys(STATS, float("nan"))
    return {"mean": float(v.mean()), "p50": float(np.percentile(v, 50)), "p90": float(np.percentile(v, 90)),
            "p99": float(np.percentile(v, 99))}


def relative_diff(ours: float, peer: float) -> float:
    """(ours - peer) / peer; NaN when the peer's value is 0 or either is not finite."""
    if not (np.isfinite(ours) and np.isfinite(peer)) or peer == 0:
        return float("nan")
    return (ours - peer) / peer


def compare_latencies(ours: Mapping[str, np.ndarray], peer: Mapping[str, np.ndarray]) -> list[dict[str, Any]]:
    """One row per (metric, statistic): ours, the peer's and the relative difference."""
    rows = []
    for metric in METRICS:
        a, b = latency_stats(ours[metric]), latency_stats(peer[metric])
        for stat in STATS:
            rows.append({"metric": metric, "stat": stat, "ours": a[stat], "peer": b[stat],
                         "diff": relative_diff(a[stat], b[stat])})
    return rows


def max_abs_diff(rows: Sequence[Mapping[str, Any]]) -> float:
    """The largest |relative difference| of a comparison (NaN rows left out)."""
    diffs = [abs(r["diff"]) for r in rows if np.isfinite(r["diff"])]
    return max(diffs) if diffs else float("nan")


def format_comparison(rows: Sequence[Mapping[str, Any]], ours_label: str, peer_label: str) -> list[str]:
    """Printable lines: one per metric, each statistic as ``ours / peer (diff%)``."""
    lines = [f"      {'':<8} " + "  ".join(f"{s:>26}" for s in STATS),
             f"      {'(ms)':<8} " + "  ".join(f"{ours_label + ' / ' + peer_label + ' (diff)':>26}" for _ in STATS)]
    for metric in METRICS:
        cells = []
        for stat in STATS:
            r = next(x for x in rows if x["metric"] == metric and x["stat"] == stat)
            diff = "   n/a" if not np.isfinite(r["diff"]) else f"{r['diff']:+6.1%}"
            cells.append(f"{r['ours']:9.1f} / {r['peer']:9.1f} {diff}")
        lines.append(f"      {metric:<8} " + "  ".join(f"{c:>26}" for c in cells))
    return lines


def same_file(a: Path, b: Path) -> bool:
    """Whether two files hold the same bytes."""
    return hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()


def cpu_now_s() -> float:
    """CPU seconds this process has used."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime
