"""The simulator's compiled core against its Python sources, side by side (run by hand, and by
``tests/unit/test_sim_native.py`` at a small size):
``python -m benchmarks.sim_core_identity [--instances 64] [--requests 20000] [--designs ...]``.

Each side runs in a child process of its own: one with the compiled core (:mod:`systems.compiled_core`; it fails
when the child cannot use the build), one with ``DISAGG_SIM_NATIVE=0``. Both simulate the workloads of
:mod:`benchmarks.sim_scale_bench` (same seed, the four designs whose choices read the load indexes) and
print, per design, the sha256 of everything a run gives: every record's ``repr`` (exact floats), the record
columns of a serving job (:func:`systems.sim.record_columns.record_columns`), the load samples and the run's
counters, with the seconds each side took to simulate. Exit status 1 when any fingerprint differs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from systems.compiled_core import ENV_SWITCH

DESIGN_NAMES = ("baseline", "mooncake", "distserve", "splitwise")


def fingerprint(design: str, n_instances: int, n_requests: int) -> dict[str, Any]:
    """Simulate one design in this process: the sha256 of its outputs (see the module docstring), its
    request and event counts and its simulation seconds."""
    from benchmarks.sim_scale_bench import DESIGNS, _counts, synthetic_specs
    from harness.studies.variants import compose_variant
    from systems.sim.record_columns import record_columns
    from systems.sim.simulated_deployment import SimulatedDeployment

    spec = DESIGNS[design]
    cfg = compose_variant([*spec["overrides"], *_counts(design, n_instances)])
    specs = synthetic_specs(n_requests, spec["rate"] * n_instances, 8 * n_instances)
    started = time.perf_counter()
    _, run = SimulatedDeployment(cfg).run(specs)
    sim_s = time.perf_counter() - started
    digest = hashlib.sha256()
    for req in run.requests:
        digest.update(repr(req.to_record()).encode())
    columns = record_columns(run.requests)
    for name in sorted(columns.fields):
        digest.update(name.encode() + repr(columns.fields[name].tolist()).encode())
    digest.update(columns.chunk_times_s.tobytes() + columns.n_chunks.tobytes())
    digest.update(repr(sorted(columns.extra.items())).encode())
    digest.update(repr(run.load_samples).encode())
    digest.update(repr(sorted(run.info.items())).encode())
    return {"sha256": digest.hexdigest(), "requests": len(run.requests), "ok": int(run.info.get("n_ok", 0)),
            "sim_s": sim_s}


def run_side(native: bool, designs: Sequence[str], n_instances: int, n_requests: int) -> dict[str, Any]:
    """One side in a child process: ``{"native": status reason or "sources", "designs": {design: fingerprint}}``.
    ``RuntimeError`` when the child fails, or cannot use the compiled core when ``native``."""
    env = {k: v for k, v in os.environ.items() if k != ENV_SWITCH}
    if not native:
        env[ENV_SWITCH] = "0"
    cmd = [sys.executable, "-m", "benchmarks.sim_core_identity", "--child", "--instances", str(n_instances),
           "--requests", str(n_requests), "--designs", *designs]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if out["active"] != native:
        raise RuntimeError(f"the {'compiled' if native else 'source'} side ran "
                           f"{'compiled' if out['active'] else 'from the sources'}: {out['reason']}")
    return out


def _child(designs: Sequence[str], n_instances: int, n_requests: int) -> None:
    from systems import compiled_core

    results = {d: fingerprint(d, n_instances, n_requests) for d in designs}
    status = compiled_core.status()
    sys.stdout.write(json.dumps({"active": status.active, "reason": status.reason, "designs": results}) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sim_core_identity",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=64)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--designs", nargs="+", choices=DESIGN_NAMES, default=list(DESIGN_NAMES))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.designs, args.instances, args.requests)
        return 0
    compiled = run_side(True, args.designs, args.instances, args.requests)["designs"]
    sources = run_side(False, args.designs, args.instances, args.requests)["designs"]
    print(f"{args.requests:,} requests through {args.instances} instances, compiled core vs Python sources")
    differ = 0
    for d in args.designs:
        c, s = compiled[d], sources[d]
        same = c["sha256"] == s["sha256"]
        differ += not same
        print(f"  {d:<10} {'identical' if same else 'DIFFERENT'}  sha256 {c['sha256'][:16]}"
              f"{'' if same else ' vs ' + s['sha256'][:16]}  {c['ok']}/{c['requests']} ok  simulate "
              f"{c['sim_s']:.2f} s compiled, {s['sim_s']:.2f} s sources ({s['sim_s'] / c['sim_s']:.2f}x)")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
