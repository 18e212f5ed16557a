"""``job=sim_study study.kind=real_replay``: does the simulator reproduce real GPU runs?

Replays each of the DistServe authors' measured A100 runs (``distserve_opt13b_a100/``, read by
:mod:`workloads.distserve_runs`) in the simulator with its own requests, arrival times and layout, and
compares what was measured with what is predicted, with the same definitions on both sides: TTFT = first
token - arrival, TPOT = (completion - first token) / (output tokens - 1), 0 for a one-token output.

``study.variants`` maps a layout name to its overrides: ``vllm`` (one vLLM TP-1 instance, ``vllm-*`` runs),
``c21d12`` (prefill TP 2 PP 1 + decode TP 1 PP 2, the runs tagged so) and every candidate for the runs whose
name carries no layout. ``study.params``:

- ``runs_dir``: the folder with ``measured/`` and ``workload/`` (relative to the data directory);
- ``untagged_candidates``: the layouts an untagged ``distserve-*`` run may have; the one chosen is the
  candidate whose prediction (shipped profile) is closest to the lowest-rate untagged run (TTFT and TPOT
  at p50 and p90: at low load TTFT is the prefill time and TPOT the decode step, which fix the prefill and
  decode parallelism), ties to fewer GPUs. That run is used for the choice and not scored;
- ``fit_runs``: per system (``vllm``, ``distserve``), the runs a profile correction is fitted on
  (``engine.profile_adjust``: prefill scale, per-step and per-sequence decode cost; coordinate descent on
  the mean squared log error of TTFT and TPOT at p50 and p90). Those runs are never scored; every other
  run of that system is predicted with the fitted correction, and also with the shipped profile;
- ``slo_pairs_ms``: the (TTFT, TPOT) bounds of joint attainment (a request attains when both hold);
- ``targets``: relative error bounds of the medians and p90s, and the attainment bound in points, checked
  on runs that are scored and not overloaded (measured p90 TTFT under ``overload_p90_ttft_s``).

A run is *overloaded* (on either side) when its TTFT grows through the run: the median TTFT of its last
quarter of requests is at least ``growth_ratio`` times that of its first quarter and at least
``growth_min_s``. Writes ``replay.csv`` (one row per run and metric), ``replay_runs.csv`` (one row per run),
``replay_fit.csv`` (the fitted corrections) and ``requests.parquet`` (every request, measured and predicted).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from harness.config import Config
from harness.jobs import JobResult
from harness.results import RunFolder
from harness.studies.simulate import load_requests, simulate
from harness.studies.variants import compose_variant, job_overrides
from systems.engine_config import ProfileAdjustConfig, SimEngineConfig
from systems.sim.simulated_deployment import SimulatedDeployment
from vocab.errors import ConfigError
from vocab.records import RequestStatus
from vocab.result_files import REPLAY_FILE, REPLAY_FIT_FILE, REPLAY_RUNS_FILE, REQUESTS_FILE
from workloads.datadir import resolve_trace_path
from workloads.distserve_runs import RunName, parse_run_name, read_measured_run

log = logging.getLogger(__name__)

QUANTILES = (50, 90, 99)
FIT_METRICS = ("ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90")
FIT_STEPS = {"prefill_scale": (0.2, 0.1, 0.05, 0.02), "step_ms": (8.0, 4.0, 2.0, 1.0), "seq_ms": (0.4, 0.2, 0.1, 0.05)}


@dataclass(frozen=True)
class ReplayParams:
    """``study.params`` of a real_replay study (see the module docstring)."""

    runs_dir: str
    untagged_candidates: tuple[str, ...]
    fit_runs: dict[str, tuple[str, ...]]
    slo_pairs_ms: tuple[tuple[float, float], ...]
    median_error: float = 0.10
    p90_error: float = 0.20
    attainment_points: float = 5.0
    overload_p90_ttft_s: float = 1.0
    growth_ratio: float = 2.0
    growth_min_s: float = 0.5

    @classmethod
    def from_config(cls, params: dict[str, Any], layouts: Sequence[str]) -> ReplayParams:
        known = {f.name for f in dataclasses.fields(cls)} - {"median_error", "p90_error", "attainment_points"}
        known |= {"targets"}
        unknown = sorted(set(params) - known)
        if unknown:
            raise ConfigError(f"study.params: unknown key(s) {', '.join(unknown)} for study.kind=real_replay; "
                              f"expected {', '.join(sorted(known))}")
        for key in ("runs_dir", "untagged_candidates", "fit_runs", "slo_pairs_ms"):
            if key not in params:
                raise ConfigError(f"study.params.{key}: required by study.kind=real_replay")
        candidates = tuple(params["untagged_candidates"])
        missing = [c for c in (*candidates, "vllm", "c21d12") if c not in layouts]
        if missing:
            raise ConfigError(f"study.variants: no layout named {', '.join(missing)} (needed by the runs or "
                              f"study.params.untagged_candidates); layouts: {', '.join(layouts)}")
        pairs = tuple((float(t), float(p)) for t, p in params["slo_pairs_ms"])
        targets = dict(params.get("targets") or {})
        bad = sorted(set(targets) - {"median_error", "p90_error", "attainment_points"})
        if bad:
            raise ConfigError(f"study.params.targets: unknown key(s) {', '.join(bad)}; expected median_error, "
                              "p90_error, attainment_points")
        fit_runs = {str(k): tuple(v) for k, v in dict(params["fit_runs"]).items()}
        if set(fit_runs) - {"vllm", "distserve"}:
            raise ConfigError(f"study.params.fit_runs: keys are systems (vllm, distserve), got {', '.join(fit_runs)}")
        extra = {k: float(params[k]) for k in ("overload_p90_ttft_s", "growth_ratio", "growth_min_s") if k in params}
        return cls(str(params["runs_dir"]), candidates, fit_runs, pairs, **{k: float(v) for k, v in targets.items()},
                   **extra)


@dataclass(frozen=True)
class Latencies:
    """Per-request TTFT and TPOT (ms) of one side of a run, in arrival order (NaN: no token)."""

    ttft_ms: np.ndarray
    tpot_ms: np.ndarray


def measured_latencies(path: Path) -> Latencies:
    reqs = read_measured_run(path)
    return Latencies(np.array([r.ttft_ms for r in reqs]), np.array([r.tpot_ms for r in reqs]))


def predicted_latencies(records: Sequence[Any]) -> Latencies:
    """TTFT and TPOT of simulated records by DistServe's definitions (a request without an OK status: NaN)."""
    ordered = sorted(records, key=lambda r: r.request_id)
    ttft, tpot = [], []
    for r in ordered:
        ok = r.status == RequestStatus.OK
        ttft.append((r.first_token_s - r.arrival_s) * 1e3 if ok else math.nan)
        tpot.append(((r.finish_s - r.first_token_s) * 1e3 / (r.n_out - 1) if r.n_out > 1 else 0.0) if ok else math.nan)
    return Latencies(np.array(ttft), np.array(tpot))


def overloaded(ttft_ms: np.ndarray, growth_ratio: float, growth_min_s: float) -> bool:
    """TTFT grows through the run: the last quarter's median is >= ``growth_ratio`` x the first quarter's and
    >= ``growth_min_s`` (a request without a first token counts as infinitely late)."""
    values = np.where(np.isnan(ttft_ms), np.inf, ttft_ms)
    quarter = max(len(values) // 4, 1)
    first, last = float(np.median(values[:quarter])), float(np.median(values[-quarter:]))
    return last >= growth_ratio * first and last >= growth_min_s * 1e3


def run_metrics(lat: Latencies, pairs: Sequence[tuple[float, float]]) -> dict[str, float]:
    """TTFT and TPOT quantiles (NaN requests count as infinitely late) and joint attainment per SLO pair (%)."""
    ttft = np.where(np.isnan(lat.ttft_ms), np.inf, lat.ttft_ms)
    tpot = np.where(np.isnan(lat.tpot_ms), np.inf, lat.tpot_ms)
    out: dict[str, float] = {}
    for name, values in (("ttft", ttft), ("tpot", tpot)):
        for q in QUANTILES:
            out[f"{name}_p{q}"] = float(np.percentile(values, q, method="linear")) if np.isfinite(values).all() \
                else float(np.quantile(values, q / 100, method="inverted_cdf"))
    for t, p in pairs:
        out[f"attainment_{t:g}_{p:g}"] = float(np.mean((ttft <= t) & (tpot <= p)) * 100)
    return out


def relative_error(predicted: float, measured: float) -> float:
    if measured == 0 or not math.isfinite(measured) or not math.isfinite(predicted):
        return math.nan if predicted != measured else 0.0
    return (predicted - measured) / measured


def fit_objective(predicted: dict[str, float], measured: dict[str, float]) -> float:
    """Mean squared log ratio over :data:`FIT_METRICS` (a non-finite prediction costs as a 10x miss)."""
    total = 0.0
    for k in FIT_METRICS:
        p, m = predicted[k], measured[k]
        total += math.log(p / m) ** 2 if p > 0 and m > 0 and math.isfinite(p) else math.log(10.0) ** 2
    return total / len(FIT_METRICS)


class RunReplayer:
    """One measured run, its deployment composed once, simulated with any profile correction."""

    def __init__(self, run: RunName, layout: str, cfg: Config, measured_path: Path,
                 pairs: Sequence[tuple[float, float]]) -> None:
        self.run, self.layout, self.cfg, self.pairs = run, layout, cfg, pairs
        self.requests = load_requests(cfg, cfg.workload)
        self.measured = measured_latencies(measured_path)
        if len(self.measured.ttft_ms) != len(self.requests):
            raise ConfigError(f"{measured_path}: {len(self.measured.ttft_ms)} requests measured, but its workload file "
                              f"has {len(self.requests)}")
        self.measured_metrics = run_metrics(self.measured, pairs)
        self.n_gpus = SimulatedDeployment(cfg).n_gpus

    def predict(self, adjust: ProfileAdjustConfig) -> tuple[Latencies, dict[str, float], Any]:
        assert isinstance(self.cfg.engine, SimEngineConfig)
        cfg = dataclasses.replace(self.cfg, engine=dataclasses.replace(self.cfg.engine, profile_adjust=adjust))
        point = simulate(SimulatedDeployment(cfg), self.requests)
        lat = predicted_latencies(point.records)
        return lat, run_metrics(lat, self.pairs), point


def fit_adjust(replayers: Sequence[RunReplayer], rounds: int = 3) -> tuple[ProfileAdjustConfig, float, int]:
    """The profile correction minimising the mean :func:`fit_objective` over ``replayers``: coordinate descent
    from no correction, each parameter stepped by :data:`FIT_STEPS` (coarse to fine) while the objective falls.
    Returns (correction, objective, simulations run)."""
    cache: dict[tuple[float, float, float], float] = {}

    def cost(values: dict[str, float]) -> float:
        key = (round(values["prefill_scale"], 6), round(values["step_ms"], 6), round(values["seq_ms"], 6))
        if key not in cache:
            adjust = ProfileAdjustConfig(*key)
            cache[key] = float(np.mean([fit_objective(r.predict(adjust)[1], r.measured_metrics) for r in replayers]))
        return cache[key]

    best = {"prefill_scale": 1.0, "step_ms": 0.0, "seq_ms": 0.0}
    best_cost = cost(best)
    for _ in range(rounds):
        improved = False
        for name, steps in FIT_STEPS.items():
            for step in steps:
                for sign in (1.0, -1.0):
                    while True:
                        trial = {**best, name: best[name] + sign * step}
                        if trial[name] < (0.05 if name == "prefill_scale" else 0.0):
                            break
                        c = cost(trial)
                        if c >= best_cost - 1e-12:
                            break
                        best, best_cost, improved = trial, c, True
        if not improved:
            break
    return ProfileAdjustConfig(best["prefill_scale"], best["step_ms"], best["seq_ms"]), best_cost, len(cache) * len(replayers)


def _layout_of(run: RunName) -> Optional[str]:
    if run.system == "vllm":
        return "vllm"
    return run.layout or None


def run_real_replay(cfg: Config, folder: RunFolder) -> JobResult:
    study = cfg.study
    layouts = dict(study.variants)
    params = ReplayParams.from_config(dict(study.params), list(layouts))
    runs_dir = resolve_trace_path(params.runs_dir, cfg.data_dir, allow_dir=True)
    measured_files = sorted((runs_dir / "measured").glob("*.exp"))
    if not measured_files:
        raise ConfigError(f"study.params.runs_dir: {runs_dir} has no measured/*.exp runs")
    try:
        runs = sorted((parse_run_name(f.name) for f in measured_files), key=lambda r: (r.system, r.layout, r.rate_rps))
    except ValueError as exc:
        raise ConfigError(f"{runs_dir / 'measured'}: {exc}") from None
    by_name = {r.name: r for r in runs}
    for system, names in params.fit_runs.items():
        for name in names:
            if name not in by_name or by_name[name].system != system:
                raise ConfigError(f"study.params.fit_runs.{system}: no {system} run named {name!r} in {runs_dir}/measured")
    for run in runs:
        if run.layout and run.layout not in layouts:
            raise ConfigError(f"study.variants: run {run.name} names layout {run.layout!r}, which has no variant")
    base = job_overrides()

    def replayer(run: RunName, layout: str) -> RunReplayer:
        overrides = [*base, *layouts[layout], f"workload.file={runs_dir / 'workload' / (run.name + '.exp')}",
                     "workload.arrival.kind=trace", "workload.max_requests=null"]
        return RunReplayer(run, layout, compose_variant(overrides), runs_dir / "measured" / f"{run.name}.exp",
                           params.slo_pairs_ms)

    identity = ProfileAdjustConfig()
    roles: dict[str, str] = {}
    # the layout of the untagged DistServe runs, from the lowest-rate one
    untagged = [r for r in runs if r.system == "distserve" and not r.layout]
    chosen_untagged, choice_rows = "", []
    if untagged:
        probe = min(untagged, key=lambda r: (r.rate_rps, r.n_requests))
        roles[probe.name] = "layout choice"
        scored = []
        for layout in params.untagged_candidates:
            rep = replayer(probe, layout)
            _, metrics, _ = rep.predict(identity)
            err = fit_objective(metrics, rep.measured_metrics)
            scored.append((err, rep.n_gpus, layout))
            choice_rows.append({"run": probe.name, "layout": layout, "n_gpus": rep.n_gpus, "objective": err,
                                **{f"predicted_{k}": metrics[k] for k in FIT_METRICS},
                                **{f"measured_{k}": rep.measured_metrics[k] for k in FIT_METRICS}})
        best_err = min(s[0] for s in scored)
        # within 5% of the best objective counts as a tie: the fewest GPUs wins
        chosen_untagged = min((s for s in scored if s[0] <= best_err * 1.05 + 1e-9), key=lambda s: (s[1], s[0]))[2]
        log.info("untagged DistServe runs: layout %s (closest to %s among %s)", chosen_untagged, probe.name,
                 ", ".join(params.untagged_candidates))

    replayers = {r.name: replayer(r, _layout_of(r) or chosen_untagged) for r in tqdm(
        runs, desc="composing runs", unit="run", disable=not cfg.engine.progress)}
    fits: dict[str, ProfileAdjustConfig] = {}
    fit_rows = []
    for system, names in params.fit_runs.items():
        for name in names:
            roles[name] = "profile fit"
        adjust, objective, n_sims = fit_adjust([replayers[n] for n in names])
        fits[system] = adjust
        fit_rows.append({"system": system, "fit_runs": " ".join(names), **dataclasses.asdict(adjust),
                         "objective": objective, "simulations": n_sims})
        log.info("%s profile correction from %s: prefill x%.3g, +%.3g ms/step, +%.3g ms/seq (objective %.4f, %d sims)",
                 system, ", ".join(names), adjust.prefill_scale, adjust.step_ms, adjust.seq_ms, objective, n_sims)

    long_rows, run_rows, frames = [], [], []
    for run in tqdm(runs, desc="replaying", unit="run", disable=not cfg.engine.progress):
        rep = replayers[run.name]
        adjust = fits.get(run.system, identity)
        shipped_lat, shipped, _ = rep.predict(identity)
        lat, predicted, point = rep.predict(adjust) if adjust != identity else (shipped_lat, shipped, None)
        measured = rep.measured_metrics
        role = roles.get(run.name, "scored")
        m_over = overloaded(rep.measured.ttft_ms, params.growth_ratio, params.growth_min_s)
        p_over = overloaded(lat.ttft_ms, params.growth_ratio, params.growth_min_s)
        in_scope = role == "scored" and measured["ttft_p90"] < params.overload_p90_ttft_s * 1e3
        group = "vllm" if run.system == "vllm" else ("distserve-" + (run.layout or "untagged"))
        within_all = True
        for metric, value in measured.items():
            pred = predicted[metric]
            if metric.startswith("attainment"):
                error, bound = pred - value, params.attainment_points
            else:
                error = relative_error(pred, value)
                bound = params.median_error if metric.endswith("p50") else (
                    params.p90_error if metric.endswith("p90") else math.nan)
            checked = in_scope and math.isfinite(bound)
            within = bool(abs(error) <= bound) if checked and math.isfinite(error) else (False if checked else None)
            if checked and not within:
                within_all = False
            long_rows.append({"run": run.name, "group": group, "system": run.system, "layout": rep.layout,
                              "rate_rps": run.rate_rps, "n_requests": run.n_requests, "n_gpus": rep.n_gpus,
                              "role": role, "in_target_scope": in_scope, "metric": metric, "measured": value,
                              "predicted": pred, "predicted_shipped_profile": shipped[metric],
                              "error": error, "error_kind": "points" if metric.startswith("attainment") else "relative",
                              "bound": bound, "within": within})
        run_rows.append({"run": run.name, "group": group, "system": run.system, "layout": rep.layout,
                         "rate_rps": run.rate_rps, "per_gpu_rate": run.rate_rps / rep.n_gpus, "n_gpus": rep.n_gpus,
                         "n_requests": run.n_requests, "role": role, "in_target_scope": in_scope,
                         "overloaded_measured": m_over, "overloaded_predicted": p_over,
                         "overload_agrees": m_over == p_over, "within_targets": within_all if in_scope else None,
                         "profile_adjusted": adjust != identity,
                         **{f"measured_{k}": v for k, v in measured.items()},
                         **{f"predicted_{k}": v for k, v in predicted.items()},
                         **{f"shipped_{k}": v for k, v in shipped.items()},
                         "sim_parked_for_decode_room": (point.info if point else {}).get("n_parked_for_decode_room", 0)})
        frames.append(pd.DataFrame({"run": run.name, "request": np.arange(len(lat.ttft_ms)),
                                    "measured_ttft_ms": rep.measured.ttft_ms, "measured_tpot_ms": rep.measured.tpot_ms,
                                    "predicted_ttft_ms": lat.ttft_ms, "predicted_tpot_ms": lat.tpot_ms,
                                    "shipped_ttft_ms": shipped_lat.ttft_ms, "shipped_tpot_ms": shipped_lat.tpot_ms,
                                    "input_length": [s.input_length for s in rep.requests.specs],
                                    "output_length": [s.output_length for s in rep.requests.specs]}))
    table, runs_table = pd.DataFrame(long_rows), pd.DataFrame(run_rows)
    folder.write_table(REPLAY_FILE, table)
    folder.write_table(REPLAY_RUNS_FILE, runs_table)
    folder.write_table(REPLAY_FIT_FILE, pd.DataFrame(fit_rows + [{"system": "distserve-untagged-layout", **row}
                                                          for row in choice_rows]))
    folder.write_table(REQUESTS_FILE, pd.concat(frames, ignore_index=True))
    scope = runs_table[runs_table["in_target_scope"]]
    metrics = {"study": study.kind, "figure": study.figure, "n_runs": len(runs_table),
               "n_runs_in_target_scope": len(scope), "n_runs_within_targets": int(scope["within_targets"].sum()),
               "n_checks_in_scope": int(table["within"].notna().sum()),
               "n_checks_within": int((table["within"] == True).sum()),  # noqa: E712 (None = not checked)
               "overload_agrees_runs": int(runs_table["overload_agrees"].sum()),
               "untagged_layout": chosen_untagged,
               **{f"fit_{row['system']}_{k}": row[k] for row in fit_rows for k in ("prefill_scale", "step_ms", "seq_ms")}}
    log.info("replayed %d runs: %d of %d in-scope runs within every target; overload agrees on %d of %d runs",
             len(runs_table), metrics["n_runs_within_targets"], len(scope), metrics["overload_agrees_runs"],
             len(runs_table))
    return JobResult(metrics=metrics, files={"replay": REPLAY_FILE, "runs": REPLAY_RUNS_FILE, "fit": REPLAY_FIT_FILE,
                                              "requests": REQUESTS_FILE}, tables={"study": table})
