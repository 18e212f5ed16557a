"""Our simulator against the peers' on the same scenario, timed in the same run (run by hand).

``python -m benchmarks.peer_agreement [--peer-python PY] [--simdistserve DIR] [--splitwise-sim DIR] [...]``

A peer is a checkout installed by hand beside the suite, never a dependency of it (``docs/peers.md``):
``--simdistserve`` / ``$SIMDISTSERVE_DIR`` (a DistServe checkout, the folder holding ``simdistserve/``; or
wherever ``--peer-python`` imports ``simdistserve`` from) and ``--splitwise-sim`` / ``$SPLITWISE_SIM_DIR``
(a splitwise-sim checkout). Each runs under ``--peer-python`` / ``$PEER_PYTHON`` (default: this
interpreter), which must have the peer's own requirements. A peer that is not found is reported with how
to install it and skipped; the script still exits 0.

For each peer found it prints, per scenario, latency statistics (mean, P50, P90, P99 of TTFT, TPOT and E2E,
one definition on both sides; see :mod:`benchmarks.peers.common`) as ``ours / peer (relative
difference)``, then the seconds each side took in this run: the simulation call (wall and CPU) and, for the
peer, its whole process (interpreter start and imports too).

- simdistserve: one prefill (TP 2) + one decode (TP 1) instance of OPT-13B on ShareGPT lengths at a
  Poisson rate, (1) the peer as shipped against ours with ``engine.iteration_overhead=simdistserve``,
  (2) the peer with its per-iteration overhead set to 0 against ours by default; then the placement search
  of ``experiment=distserve_placement`` against simdistserve's own search on the same request set (chosen
  layout and per-GPU rate, the capacity each side finds, and every layout's rate in the peer's search).
- splitwise-sim: a vLLM-style baseline of DGX machines on the first requests of the Azure conversation
  trace, (1) ours by default, (2) ours with ``engine.token_phase_timing=splitwise_sim``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.peers import distserve as ds
from benchmarks.peers import splitwise as sw
from benchmarks.peers.common import (
    Peer,
    compare_latencies,
    cpu_now_s,
    format_comparison,
    locate_peer,
    max_abs_diff,
    missing_modules,
    same_file,
)

INSTALL = {
    "simdistserve": ("git clone https://github.com/LLMServe/DistServe /tmp/peers/DistServe; "
                     "python -m venv /tmp/peers-venv; /tmp/peers-venv/bin/pip install simpy pandas numpy tqdm; "
                     "then --simdistserve /tmp/peers/DistServe --peer-python /tmp/peers-venv/bin/python"),
    "splitwise-sim": ("git clone https://github.com/Mutinifni/splitwise-sim /tmp/peers/splitwise-sim; "
                      "/tmp/peers-venv/bin/pip install hydra-core omegaconf pandas numpy scipy networkx; "
                      "/tmp/peers-venv/bin/pip install --no-deps hydra-ray-launcher==1.2.1 (its config names the "
                      "ray launcher); then --splitwise-sim /tmp/peers/splitwise-sim --peer-python /tmp/peers-venv/bin/python"),
}


def find_peer(name: str, path: str | None, env_var: str, markers: tuple[str, ...], modules: tuple[str, ...],
              python: str, probe: str | None = None) -> Peer:
    """The peer if its checkout and its interpreter's requirements are there; else a Peer saying why not."""
    peer = locate_peer(name, path, env_var, markers, python, probe)
    if not peer.found:
        return peer
    missing = missing_modules(python, modules)
    if missing:
        return Peer(name, None, python, f"{python} lacks {', '.join(missing)} (the peer's requirements)")
    return peer


def _profiles_note(peer: Peer, files: dict[str, str], profiles_dir: str | None) -> str:
    from systems.sim.perf.profiles import ProfileNotFoundError, find_profile

    notes = []
    for ours_rel, peer_rel in files.items():
        try:
            same = same_file(find_profile(ours_rel, profiles_dir), peer.root / peer_rel)
        except (ProfileNotFoundError, OSError) as exc:
            notes.append(f"{peer_rel}: not compared ({exc})")
            continue
        notes.append(f"{peer_rel} {'==' if same else '!='} our {ours_rel}")
    return "; ".join(notes)


def _times(ours_s: float, ours_cpu: float, peer: dict[str, Any], call: str) -> str:
    return (f"    time: ours {ours_s:.2f} s wall / {ours_cpu:.2f} s CPU (cluster, simulation, records); peer {call} "
            f"{peer['simulate_s']:.2f} s wall / {peer['simulate_cpu_s']:.2f} s CPU "
            f"(its whole process: {peer['process_wall_s']:.2f} s wall / {peer['process_cpu_s']:.2f} s CPU); "
            f"peer CPU / ours CPU = {peer['simulate_cpu_s'] / max(ours_cpu, 1e-9):.1f}")


def simdistserve_section(peer: Peer, args: argparse.Namespace) -> None:
    from harness.studies.simulate import load_requests, point_workload
    from harness.studies.variants import compose_variant

    print(f"  profiles: {_profiles_note(peer, ds.PROFILE_FILES, args.profiles_dir)}")
    base = ds.pair_overrides(2, 1, args.prefill_max_tokens)
    cfg = compose_variant(base)
    specs = load_requests(cfg, point_workload(cfg, rate_rps=args.rate, max_requests=args.requests)).specs
    print(f"  scenario: OPT-13B, 1 prefill (TP 2) + 1 decode (TP 1) A100, {len(specs)} ShareGPT requests at "
          f"{args.rate:g} req/s (Poisson, seed {cfg.workload.arrival.seed}); peer output_len: {args.output_mode}; "
          f"ours: kv_link nvlink_a100, max_num_batched_tokens {args.prefill_max_tokens}")
    for title, option, zero in (("peer as shipped vs ours with engine.iteration_overhead=simdistserve",
                                 "simdistserve", False),
                                ("peer with add_ray_overhead -> 0 vs ours by default (iteration_overhead=none)",
                                 "none", True)):
        ours, ours_s, ours_cpu = ds.run_ours([*base, f"engine.iteration_overhead={option}"], specs)
        theirs, times = ds.run_peer_pair(peer, specs, 2, 1, args.output_mode, zero_overhead=zero)
        rows = compare_latencies(ours, theirs)
        print(f"  [{title}]  {len(ours['ttft_ms'])} / {len(theirs['ttft_ms'])} requests finished; "
              f"largest |diff| {max_abs_diff(rows):.1%}; our preemptions (KV full) {int(ours['preemptions'][0])}")
        print("\n".join(format_comparison(rows, "ours", "peer")))
        print(_times(ours_s, ours_cpu, times, "run_experiment"))
    if not args.skip_placement:
        placement(peer, args)


def placement(peer: Peer, args: argparse.Namespace) -> None:
    from harness.results import RunFolder
    from harness.studies.placement_search import placement_params, run_placement_search
    from harness.studies.simulate import load_requests, point_workload
    from harness.studies.variants import compose_variant

    cfg = compose_variant(["experiment=distserve_placement", *args.placement_overrides])
    params = placement_params(cfg.study)
    n = cfg.study.max_requests or 300
    specs = load_requests(cfg, point_workload(cfg, rate_rps=1.0, max_requests=n)).specs
    print(f"  [placement search] OPT-13B, 1 node x {params['gpus_per_node']} A100, TTFT {cfg.slo.ttft_ms:g} ms / "
          f"TPOT {cfg.slo.tpot_ms:g} ms at P{cfg.slo.attainment_target * 100:g}, the same {len(specs)} ShareGPT "
          f"requests on both sides; peer output_len: {args.placement_output_mode}")
    with tempfile.TemporaryDirectory(prefix="peer_placement_") as tmp:
        cpu0, start = cpu_now_s(), time.perf_counter()
        result = run_placement_search(cfg, RunFolder(Path(tmp)))
        ours_s, ours_cpu = time.perf_counter() - start, cpu_now_s() - cpu0
    m = result.metrics
    theirs = ds.run_peer_placement(peer, specs, args.placement_output_mode, params["gpus_per_node"], cfg.slo.ttft_ms,
                                   cfg.slo.tpot_ms, float(params.get("max_per_gpu_rate", 5.0)),
                                   float(params.get("esp", 0.25)))
    print(f"    ours ({params.get('method', 'alg1')}, iteration_overhead={cfg.engine.iteration_overhead}): "
          f"{m.get('n_prefill') or 1} x P tp{m['prefill_tp']}pp{m['prefill_pp']} + {m.get('n_decode') or 1} x D "
          f"tp{m['decode_tp']}pp{m['decode_pp']} = {m['n_gpus']} GPUs, {m['per_gpu_goodput_rps']} req/s per GPU")
    best = theirs["best_config"]
    print(f"    peer (simdistserve.simulate's search, low affinity, {len(theirs['configs'])} layouts incl. PP): "
          f"{ds.config_label(best) if best else 'none'}, {theirs['best_per_gpu_rate']} req/s per GPU")
    if theirs["configs"]:
        print("    per-GPU rate per layout, ours / peer (-: not searched):")
        for label, a, b in ds.layout_rows(ds.our_layout_rates(result.tables.get("study")), theirs["configs"]):
            print(f"      {label:<22} {'-' if a is None else f'{a:.4g}':>8} / {'-' if b is None else f'{b:.4g}':<8}")
    else:
        print("    the peer's search returned no layout (its worker processes failed); its stderr ends with:\n"
              + theirs["stderr_tail"])
    print(f"    time: ours {ours_s:.2f} s wall / {ours_cpu:.2f} s CPU (whole job); peer search "
          f"{theirs['search_s']:.2f} s wall / {theirs['search_cpu_s']:.2f} s CPU incl. its worker processes "
          f"(whole process {theirs['process_wall_s']:.2f} s wall); peer CPU / ours CPU = "
          f"{theirs['search_cpu_s'] / max(ours_cpu, 1e-9):.1f}")


def splitwise_section(peer: Peer, args: argparse.Namespace) -> None:
    from harness.studies.simulate import load_requests, point_workload
    from harness.studies.variants import compose_variant

    print(f"  profiles: {_profiles_note(peer, sw.PROFILE_FILES, args.profiles_dir)}")
    base = sw.our_overrides(args.machines, args.hardware, "llama2_70b", "azure_conv")
    cfg = compose_variant(base)
    specs = load_requests(cfg, point_workload(cfg, max_requests=args.splitwise_requests)).specs
    span = max(s.arrival_s for s in specs) - min(s.arrival_s for s in specs)
    print(f"  scenario: Llama-2-70B, {args.machines} x DGX ({args.hardware}, TP 8) vLLM-style baseline, round robin, "
          f"the first {len(specs)} requests of the Azure conversation trace ({span:.0f} s of arrivals)")
    theirs, times = sw.run_peer(peer, specs, args.machines, args.hardware, "llama2_70b")
    for option in ("ours", "splitwise_sim"):
        ours, ours_s, ours_cpu = ds.run_ours([*base, f"engine.token_phase_timing={option}"], specs)
        rows = compare_latencies(ours, theirs)
        print(f"  [peer vs ours with engine.token_phase_timing={option}]  {len(ours['ttft_ms'])} / "
              f"{times['completed']} requests finished; largest |diff| {max_abs_diff(rows):.1%}; "
              f"our preemptions (KV full) {int(ours['preemptions'][0])}")
        print("\n".join(format_comparison(rows, "ours", "peer")))
        print(_times(ours_s, ours_cpu, times, "run_simulation"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer-python", default=os.environ.get("PEER_PYTHON", sys.executable),
                        help="interpreter with the peers' requirements (default $PEER_PYTHON, else this one)")
    parser.add_argument("--simdistserve", help="DistServe checkout (holds simdistserve/); default $SIMDISTSERVE_DIR")
    parser.add_argument("--splitwise-sim", help="splitwise-sim checkout; default $SPLITWISE_SIM_DIR")
    parser.add_argument("--only", choices=("simdistserve", "splitwise-sim"), help="compare with one peer only")
    parser.add_argument("--profiles-dir", help="our profiles folder (default: the usual search)")
    parser.add_argument("--requests", type=int, default=1000, help="simdistserve latency scenario: requests")
    parser.add_argument("--rate", type=float, default=2.0,
                        help="simdistserve latency scenario: req/s (Poisson); above ~2.5 our decode instance fills its "
                             "KV cache and preempts, which the peer does not model")
    parser.add_argument("--prefill-max-tokens", type=int, default=163008,
                        help="ours: max_num_batched_tokens; simdistserve's prefill_max_tokens for OPT-13B TP 2")
    parser.add_argument("--output-mode", choices=ds.OUTPUT_MODES, default="same_work",
                        help="simdistserve's output_len: n - 1 (same decode steps as ours) or n (as recorded)")
    parser.add_argument("--placement-output-mode", choices=ds.OUTPUT_MODES, default="as_recorded",
                        help="the same for the placement search (default n: the peer's search as its README runs a "
                             "dataset, which study.params.tpot_rule=simdistserve mirrors)")
    parser.add_argument("--skip-placement", action="store_true", help="skip the placement searches")
    parser.add_argument("--placement-overrides", nargs="*", default=[],
                        help="extra overrides of experiment=distserve_placement (ours)")
    parser.add_argument("--splitwise-requests", type=int, default=2000, help="splitwise-sim scenario: requests")
    parser.add_argument("--machines", type=int, default=4, help="splitwise-sim scenario: DGX machines")
    parser.add_argument("--hardware", choices=sorted(sw.HARDWARE), default="h100_80gb")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    peers = []
    if args.only in (None, "simdistserve"):
        peers.append((find_peer("simdistserve", args.simdistserve, "SIMDISTSERVE_DIR", ds.MARKERS, ds.MODULES,
                                args.peer_python, ds.IMPORT_PROBE), simdistserve_section))
    if args.only in (None, "splitwise-sim"):
        peers.append((find_peer("splitwise-sim", args.splitwise_sim, "SPLITWISE_SIM_DIR", sw.MARKERS, sw.MODULES,
                                args.peer_python), splitwise_section))
    for peer, section in peers:
        print(f"== {peer.name}")
        if not peer.found:
            print(f"  {peer.reason}; nothing compared. To install it beside the suite (never into its "
                  f"environment): {INSTALL[peer.name]}. See docs/peers.md.")
            continue
        print(f"  checkout {peer.root}, interpreter {peer.python}")
        section(peer, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
