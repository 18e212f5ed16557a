"""How the simulator's cost per request grows with the cluster size (issue #14 item 4). Run by hand:
``python -m benchmarks.sim_scale_bench [--repeats 3] [--sizes 16 64 256 1024] [--requests N] [--skip-million]
[--instructions]``.

Every case runs in a fresh subprocess (so its peak RSS, ``ru_maxrss``, is its own), after an untimed warm-up
run of the same design on 8 instances (one-off costs of first calls), on a synthetic workload
generated in-process from a seed: Poisson arrivals at a fixed rate *per instance* (the load per instance is the
same at every size), prompt lengths uniform in 256..3,071 tokens, output lengths geometric with mean 96 (at
most 1,024), and prompts that start with one of ``8 x instances`` shared prefixes of two 256-token blocks
(followed by blocks of their own), so cache-aware choices have something to find.

Records, as ``--records`` says: ``columns`` (default) gathers them as the columns a serving job reads
(:func:`systems.sim.record_columns.record_columns`: what an ``engine=sim`` point builds before its summary
and ``requests.parquet``), kept to the end of the case, so their memory counts; ``objects`` makes one
``RequestRecord`` per request (what the simulator studies read, ``SimRun.records``).

Cases:
  (1) scaling: seconds of wall time per 1,000 requests (building the cluster, simulating, and the records)
      at 16, 64, 256 and 1,024 instances, the same ``--requests`` at every size
      (so only the cluster size changes: a smaller cluster serves them over a longer time at the same load per
      instance; the footprint of a run grows with its requests, which alone costs up to ~20% per request on a
      small-cache machine), for the designs whose choices look at instances: the vLLM baseline's router (least
      outstanding), Mooncake's Conductor (prefill candidates over a DRAM pool, half prefill and half decode
      instances), DistServe's decode choice (fastest estimated step with room, round-robin prefill) and
      Splitwise's dynamic mixed pool (a quarter of the machines on prompts; token machines lent when a prompt
      queue gets long). Prints the medians of ``--repeats`` runs, in wall seconds and in CPU seconds of the
      process (steadier on a shared machine), and the ratio 1,024 vs 16 instances (target <= 1.3x), with the
      range of each repeat's own ratio (how far one repeat strays on this machine). The sizes take turns (one
      run of each, then the next repeat), so a drift of the machine's speed falls on all of them.
      ``--reference CHECKOUT`` runs every case in another checkout of this project too (built with its
      own ``make setup``), each run next to this checkout's, and prints its figures and ratios beside these:
      a before-and-after from one run, where figures from two runs would carry the machine's drift between
      them (the large clusters' cost is in memory latency, which moves with the neighbours' use of the
      shared cache). ``--reference .`` (this checkout against itself) shows how far two identical builds
      differ in one run;
  (2) 1,000,000 requests through 1,024 instances of the vLLM baseline (least outstanding): target <= 60 s wall
      and <= 4 GiB peak RSS. With ``--records objects`` its records are built one at a time and dropped (the
      cost of building them is counted, their memory is not: a run that keeps them holds a ``RequestRecord``
      and a tuple of token times per request on top);
  (3) with ``--instructions``: machine instructions per request at the smallest and the largest size, counted by
      valgrind (``cachegrind`` without its cache simulation; Debian's ``valgrind`` package), for each design: a
      figure that neither the machine's speed nor its caches change, where case (1)'s seconds carry both (a
      larger cluster spreads the same requests over more instances' state, which costs cache misses, not
      instructions). Each size runs twice under valgrind, generating ``--instruction-requests`` requests both
      times and simulating all of them or only the first: the difference, over the requests it adds, is what
      simulating and recording one request costs. About 50 times slower than a plain run. ``--cache-misses``
      counts, the same way, the misses per request of valgrind's model of a 1 MiB last-level cache (a core's
      L2 here): the accesses that had to go further, to the shared L3 or to memory. Like instructions, and
      unlike seconds, the neighbours on a shared machine do not move it; it is what a larger cluster adds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from systems.compiled_core import ENV_SWITCH
from vocab.records import RequestSpec

BLOCK = 256
PREFIX_BLOCKS = 2
MODEL = ["model=llama3_8b", "hardware=a100_80gb", "slo=none", "engine.progress=false"]
# per-instance arrival rates (requests/s) giving moderate load: about half of what an instance sustains
DESIGNS: dict[str, dict[str, Any]] = {
    "baseline": {"overrides": ["system=vllm_baseline", "system.router=least_loaded", *MODEL],
                 "rate": 1.5, "roles": {"colocated": 1.0}},
    "mooncake": {"overrides": ["system=mooncake", "system.router=conductor", *MODEL,
                               "engine.kv_pool.dram_tokens_per_node=200000", "engine.kv_pool.remote_link=rdma_200",
                               "engine.kv_pool.replication_threshold=4", "engine.kv_link=rdma_200"],
                 "rate": 1.5, "roles": {"prefill": 0.5, "decode": 0.5}},
    "distserve": {"overrides": ["system=distserve", "system.router=round_robin", *MODEL, "engine.kv_link=rdma_200"],
                  "rate": 1.5, "roles": {"prefill": 0.5, "decode": 0.5}},
    # a quarter of the machines on prompts: their queues get long now and then, and token machines are lent
    "splitwise": {"overrides": ["system=splitwise", "system.router=least_loaded", "system.mixed_instances=0",
                                "engine.mixed_pool=dynamic", "engine.mixed_prompt_queue_tokens=1024",
                                "engine.kv_link=rdma_200", *MODEL],
                  "rate": 1.5, "roles": {"prefill": 0.25, "decode": 0.75}},
}
ROLE_KEYS = {"colocated": "system.colocated_instances", "prefill": "system.prefill_instances",
             "decode": "system.decode_instances"}


def synthetic_specs(n_requests: int, rate_rps: float, n_groups: int, seed: int = 0) -> tuple[RequestSpec, ...]:
    """``n_requests`` requests, Poisson arrivals at ``rate_rps``, prompts opening with one of ``n_groups`` shared
    prefixes (see the module docstring)."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate_rps, n_requests)).tolist()
    inputs = rng.integers(BLOCK, 12 * BLOCK, n_requests).tolist()
    outputs = np.minimum(rng.geometric(1.0 / 96, n_requests), 1024).tolist()
    groups = rng.integers(0, n_groups, n_requests).tolist()
    specs = []
    next_block = n_groups * PREFIX_BLOCKS
    for i in range(n_requests):
        g = groups[i]
        n_blocks = -(-inputs[i] // BLOCK)
        own = n_blocks - PREFIX_BLOCKS
        ids = (g * PREFIX_BLOCKS, g * PREFIX_BLOCKS + 1, *range(next_block, next_block + max(own, 0)))[:n_blocks]
        next_block += max(own, 0)
        specs.append(RequestSpec(request_id=i, arrival_s=arrivals[i], input_length=inputs[i],
                                 output_length=outputs[i], hash_ids=ids, block_size=BLOCK, prefix_group=g))
    return tuple(specs)


def _counts(design: str, n_instances: int) -> list[str]:
    roles = DESIGNS[design]["roles"]
    return [f"{ROLE_KEYS[role]}={max(1, round(n_instances * share))}" for role, share in roles.items()]


RECORDS = ("columns", "objects")


def run_case(design: str, n_instances: int, n_requests: int, records: str = "columns",
             keep_records: bool = True, simulate_first: Optional[int] = None) -> dict[str, Any]:
    """One case in this process: timings and peak RSS. ``records``: one of :data:`RECORDS` (see the module
    docstring); ``keep_records=False`` drops each ``RequestRecord`` as soon as it is made (``objects`` only);
    ``simulate_first``: generate ``n_requests`` but simulate only the first ones (case (3))."""
    from harness.studies.variants import compose_variant
    from systems import compiled_core
    from systems.sim.record_columns import record_columns
    from systems.sim.simulated_deployment import SimulatedDeployment

    spec = DESIGNS[design]
    # warm-up, not timed: a small run of the same design takes the one-off costs (first calls, allocations)
    small = compose_variant([*spec["overrides"], *_counts(design, 8)])
    record_columns(SimulatedDeployment(small).run(synthetic_specs(400, spec["rate"] * 8, 64, seed=1))[1].requests)
    cfg = compose_variant([*spec["overrides"], *_counts(design, n_instances)])
    t0 = time.perf_counter()
    specs = synthetic_specs(n_requests, spec["rate"] * n_instances, 8 * n_instances)
    if simulate_first is not None:
        specs = specs[:simulate_first]
    t1, c1 = time.perf_counter(), time.process_time()
    _, run = SimulatedDeployment(cfg).run(specs)
    t2, c2 = time.perf_counter(), time.process_time()
    del specs
    kept: Any = None
    if records == "columns":
        kept = record_columns(run.requests)
        ok = int((kept.fields["status"] == "ok").sum())
        tokens = int(kept.n_chunks.sum())
    elif keep_records:
        kept = run.records()
        ok = sum(r.status == "ok" for r in kept)
        tokens = sum(r.n_out for r in kept)
    else:  # one record at a time, dropped at once
        ok = tokens = 0
        for req in run.requests:
            r = req.to_record()
            ok += r.status == "ok"
            tokens += r.n_out
    t3, c3 = time.perf_counter(), time.process_time()
    core = compiled_core.status()
    return {"design": design, "instances": int(run.info["n_instances"]), "requests": len(run.requests),
            "records": records,
            "ok": ok, "tokens": tokens, "generate_s": t1 - t0, "simulate_s": t2 - t1, "records_s": t3 - t2,
            "total_s": t3 - t1, "total_cpu_s": c3 - c1, "simulate_cpu_s": c2 - c1, "records_cpu_s": c3 - c2,
            "events": run.info["events"],
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "compiled": core.active, "core": core.reason}


CORES = ("compiled", "sources")


def paired_ratios(small: list[dict[str, Any]], large: list[dict[str, Any]]) -> list[float]:
    """Each repeat's ratio of the wall seconds per request, ``large`` run over the ``small`` run of the same repeat
    (the two ran one after the other, so a drift of the machine's speed between repeats cancels in each): their
    range is how far one repeat's ratio can stray on this machine. ``ValueError`` for lists of unequal length."""
    if len(small) != len(large):
        raise ValueError(f"{len(small)} runs of the small size against {len(large)} of the large one")
    return [(b["total_s"] / b["requests"]) / (a["total_s"] / a["requests"]) for a, b in zip(small, large, strict=True)]


def _subprocess(design: str, n_instances: int, n_requests: int, records: str,
                keep_records: bool = True, core: str = "compiled",
                checkout: Optional[Checkout] = None) -> dict[str, Any]:
    """One case in a child process on the simulator's compiled core or its Python sources (SystemExit when the
    child cannot use the one asked for); ``checkout``: run by another checkout (``--reference``), else by this
    one."""
    python = checkout.python if checkout is not None else sys.executable
    cmd = [python, "-m", "benchmarks.sim_scale_bench", "--case", design, "--instances", str(n_instances),
           "--case-requests", str(n_requests), "--records", records]
    if not keep_records:
        cmd.append("--drop-records")
    env = {k: v for k, v in os.environ.items() if k != ENV_SWITCH}
    if core == "sources":
        env[ENV_SWITCH] = "0"
    out = subprocess.run(cmd, capture_output=True, text=True, env=env,
                         cwd=checkout.root if checkout is not None else None)
    if out.returncode != 0:
        where = f" in {checkout.root}" if checkout is not None else ""
        raise SystemExit(f"case {design} on {n_instances} instances failed{where} ({out.returncode}): "
                         f"{out.stderr.strip()[-800:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["compiled"] != (core == "compiled"):
        where = f" (checkout {checkout.root}: run its 'make setup')" if checkout is not None else ""
        raise SystemExit(f"asked for the simulator's {core} core, the case ran on the other{where}: {result['core']}")
    return result


@dataclass(frozen=True)
class Checkout:
    """Another checkout of this project (``--reference``): its root and the Python of its virtualenv."""

    root: Path
    python: str

    @classmethod
    def of(cls, root: str) -> Checkout:
        """The checkout at ``root``, with ``root/.venv/bin/python`` (SystemExit when either is missing)."""
        path = Path(root).resolve()
        python = path / ".venv" / "bin" / "python"
        if not (path / "harness" / "bench" / "sim_scale_bench.py").is_file():
            raise SystemExit(f"--reference {root}: not a checkout of this project (no benchmarks/sim_scale_bench.py)")
        if not python.is_file():
            raise SystemExit(f"--reference {root}: no virtualenv at {python} (run 'make setup' in that checkout)")
        return cls(path, str(python))


VALGRIND_TOTAL = re.compile(r"I\s+refs:\s+([\d,]+)")
VALGRIND_LL_MISSES = re.compile(r"LL misses:\s+([\d,]+)")
# the last-level cache cachegrind models for --cache-misses: 1 MiB, 16-way, 64-byte lines (a core's L2 on the
# machines this was measured on): a miss there is a read or write that has to go to the shared L3 or to memory
CACHE_MODEL = "--LL=1048576,16,64"


def valgrind_command(design: str, n_instances: int, n_requests: int, simulate_first: int, records: str,
                     valgrind: str = "valgrind", cache_sim: bool = False) -> list[str]:
    """The command that runs one case under valgrind's instruction count (no output file), with its cache model
    (``cache_sim``: :data:`CACHE_MODEL`) or without."""
    sim = ["--cache-sim=yes", CACHE_MODEL] if cache_sim else ["--cache-sim=no"]
    return [valgrind, "--tool=cachegrind", *sim, "--cachegrind-out-file=/dev/null",
            sys.executable, "-m", "benchmarks.sim_scale_bench", "--case", design, "--instances", str(n_instances),
            "--case-requests", str(n_requests), "--simulate-first", str(simulate_first), "--records", records]


def instructions_of(valgrind_stderr: str, pattern: re.Pattern[str] = VALGRIND_TOTAL) -> int:
    """The instructions valgrind counted (its ``I refs`` line), or with :data:`VALGRIND_LL_MISSES` the misses of
    its last-level cache model (``LL misses``); ``ValueError`` when the output has no such line."""
    found = pattern.findall(valgrind_stderr)
    if not found:
        line = pattern.pattern.split(":")[0].replace("\\s+", " ")
        raise ValueError(f"no '{line}' line in valgrind's output: " + valgrind_stderr.strip()[-500:])
    return int(found[-1].replace(",", ""))


def instructions_per_request(design: str, n_instances: int, n_requests: int, records: str,
                             cache_misses: bool = False) -> float:
    """Instructions one simulated and recorded request costs at ``n_instances`` (case (3)); ``cache_misses``:
    the misses of :data:`CACHE_MODEL` it costs instead."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("--instructions and --cache-misses need valgrind on PATH "
                         "(Debian/Ubuntu: apt-get install valgrind)")
    counts = []
    for first in (1, n_requests):
        out = subprocess.run(valgrind_command(design, n_instances, n_requests, first, records, valgrind,
                                              cache_sim=cache_misses), capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"valgrind run of {design} on {n_instances} instances failed "
                             f"({out.returncode}): {out.stderr.strip()[-800:]}")
        counts.append(instructions_of(out.stderr, VALGRIND_LL_MISSES if cache_misses else VALGRIND_TOTAL))
    return (counts[1] - counts[0]) / (n_requests - 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 64, 256, 1024])
    parser.add_argument("--designs", nargs="+", default=list(DESIGNS), choices=list(DESIGNS))
    parser.add_argument("--requests", type=int, default=102_400, help="requests of each scaling case")
    parser.add_argument("--million", type=int, default=1_000_000, help="requests of case (2)")
    parser.add_argument("--skip-million", action="store_true")
    parser.add_argument("--skip-scaling", action="store_true")
    parser.add_argument("--records", choices=RECORDS, default="columns",
                        help="how the records are made: as a serving job's columns, or one RequestRecord each")
    parser.add_argument("--core", choices=[*CORES, "both"], default="compiled",
                        help="the simulator's compiled core (systems/compiled_core.py), its Python sources, or both "
                             "side by side (with the ratio)")
    parser.add_argument("--reference", metavar="CHECKOUT",
                        help="case (1) also run by another checkout of this project (its root; it needs its own "
                             "'make setup'), each of its runs next to this checkout's: both sides' seconds and "
                             "ratios from one run")
    parser.add_argument("--instructions", action="store_true", help="case (3): instructions per request (valgrind)")
    parser.add_argument("--cache-misses", action="store_true",
                        help="case (3) counts the misses of valgrind's model of a 1 MiB last-level cache per request "
                             "instead of instructions: how much of the state a request touches has left the cache, "
                             "a figure the neighbours on a shared machine do not change")
    parser.add_argument("--instruction-requests", type=int, default=20_480, help="requests of each case (3) run")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--simulate-first", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--instances", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--case-requests", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--drop-records", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(run_case(args.case, args.instances, args.case_requests, args.records,
                                  not args.drop_records, args.simulate_first)))
        return 0
    cores = list(CORES) if args.core == "both" else [args.core]
    if not args.skip_scaling:
        sides: list[tuple[str, Optional[Checkout]]] = [("", None)]
        if args.reference:
            sides.append(("reference", Checkout.of(args.reference)))
        print(f"(1) seconds per 1,000 requests, {args.requests:,} requests at every size, median of {args.repeats} "
              f"(the sizes{' and checkouts' if args.reference else ''} taking turns), records as {args.records}"
              + (f"; reference: {sides[1][1].root}" if args.reference else ""))  # type: ignore[union-attr]
        for design, core in [(d, c) for d in args.designs for c in cores]:
            # one repeat of every size (and side) after another, so the machine's drift falls on all of them
            runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
            for _ in range(args.repeats):
                for n in args.sizes:
                    for side, checkout in sides:
                        runs.setdefault((side, n), []).append(
                            _subprocess(design, n, args.requests, args.records, core=core, checkout=checkout))
            for side, _ in sides:
                label = f"{core}{', ' + side if side else ''}"
                wall, cpu = {}, {}
                for n in args.sizes:
                    done = runs[(side, n)]
                    wall[n] = statistics.median(r["total_s"] / r["requests"] * 1000 for r in done)
                    cpu[n] = statistics.median(r["total_cpu_s"] / r["requests"] * 1000 for r in done)
                    r = done[0]
                    print(f"    {design:<10} {label:<8} {n:>5} instances {r['requests']:>8} req  {wall[n]:7.3f} s/1k req "
                          f"wall  {cpu[n]:7.3f} cpu  (sim {statistics.median(x['simulate_s'] for x in done):7.2f} s, "
                          f"records {statistics.median(x['records_s'] for x in done):6.2f} s, peak RSS "
                          f"{max(x['peak_rss_mib'] for x in done):6.0f} MiB, {r['ok']}/{r['requests']} ok)", flush=True)
                lo, hi = min(args.sizes), max(args.sizes)
                spread = paired_ratios(runs[(side, lo)], runs[(side, hi)])
                print(f"    {design:<10} {label:<8} ratio {hi} vs {lo} instances: {wall[hi] / wall[lo]:.2f}x wall, "
                      f"{cpu[hi] / cpu[lo]:.2f}x cpu (target <= 1.3x); repeat by repeat "
                      f"{min(spread):.2f}x to {max(spread):.2f}x wall", flush=True)
    if not args.skip_million:
        print(f"(2) {args.million:,} requests through 1,024 instances (vLLM baseline, least outstanding), records as "
              f"{args.records}")
        totals = {}
        for core in cores:
            r = _subprocess("baseline", 1024, args.million, args.records, keep_records=False, core=core)
            label = core
            totals[label] = r["total_s"]
            print(f"    {label:<8} generate {r['generate_s']:.1f} s (not counted), simulate {r['simulate_s']:.1f} s, "
                  f"records {r['records_s']:.1f} s, total {r['total_s']:.1f} s wall, {r['total_cpu_s']:.1f} s cpu "
                  f"(target <= 60 s), peak RSS "
                  f"{r['peak_rss_mib']:.0f} MiB (target <= 4096 MiB), {r['ok']}/{r['requests']} ok, "
                  f"{r['tokens'] / 1e6:.1f} M tokens, {r['events']:,} events", flush=True)
        if "sources" in totals and "compiled" in totals:
            print(f"    sources / compiled: {totals['sources'] / totals['compiled']:.2f}x")
    for misses in [m for m, asked in ((False, args.instructions), (True, args.cache_misses)) if asked]:
        lo, hi = min(args.sizes), max(args.sizes)
        what = "misses of a 1 MiB last-level cache" if misses else "instructions"
        print(f"(3) {what} per request (valgrind), {args.instruction_requests:,} requests, records as {args.records}")
        for design in args.designs:
            per = {n: instructions_per_request(design, n, args.instruction_requests, args.records, misses)
                   for n in (lo, hi)}
            shown = {n: f"{per[n]:8.1f}" if misses else f"{per[n] / 1e3:8.1f} k" for n in (lo, hi)}
            print(f"    {design:<10} {lo} instances {shown[lo]}  {hi} instances {shown[hi]}  "
                  f"ratio {per[hi] / per[lo]:.3f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
