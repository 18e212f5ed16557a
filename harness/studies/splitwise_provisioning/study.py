"""The Splitwise provisioning study's orchestration: compose every design on every trace, bisect each
candidate split for its highest passing rate, choose the best per design and write the tables."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from harness.capacity import RateSearch, search_max_rate
from harness.config import Config
from harness.errors import ConfigError
from harness.jobs import JobResult
from harness.metrics import request_frame
from harness.result_files import PROBES_FILE, REQUESTS_FILE, STUDY_FILE
from harness.results import RunFolder, records_frame
from harness.studies.simulate import load_requests, point_workload, simulate
from harness.studies.splitwise_provisioning.machines import (
    Design,
    MachineType,
    candidate_config,
    design_from_config,
    enumerate_candidates,
    machine_type,
)
from harness.studies.splitwise_provisioning.params import ProvisioningParams
from harness.studies.splitwise_provisioning.slowdown import (
    UncontendedReference,
    meets_slowdowns,
    reference_model,
    slowdown_percentiles,
)
from harness.studies.variants import compose_variant, job_overrides
from systems.sim.simulation import SimulatedCluster
from workloads.base import WorkloadRequests

log = logging.getLogger(__name__)




def unit_rate_requests(cfg: Config, max_requests: Optional[int]) -> WorkloadRequests:
    """The trace prefix with Poisson arrivals at 1 req/s."""
    return load_requests(cfg, point_workload(cfg, rate_rps=1.0, max_requests=max_requests))


def at_rate(base: WorkloadRequests, rate_rps: float) -> WorkloadRequests:
    """``base`` (a 1 req/s Poisson schedule) at ``rate_rps``: every arrival divided by the rate."""
    specs = tuple(dataclasses.replace(s, arrival_s=s.arrival_s / rate_rps) for s in base.specs)
    schedule = dataclasses.replace(base.schedule, offered_rate_rps=base.schedule.offered_rate_rps * rate_rps,
                                   duration_s=base.schedule.duration_s / rate_rps)
    return dataclasses.replace(base, specs=specs, schedule=schedule)


# --------------------------------------------------------------------------------------------------
# The study
# --------------------------------------------------------------------------------------------------


@dataclass
class Probe:
    """One simulation of a bisection: its table row and records."""

    row: dict[str, Any]
    records: tuple[Any, ...]


@dataclass
class TracePlan:
    """One trace's composed designs, requests and uncontended reference."""

    trace: str
    designs: list[tuple[Design, Any]]
    requests: WorkloadRequests
    reference: UncontendedReference


def _workload_free(overrides: Sequence[str]) -> list[str]:
    """The job's overrides without a workload group choice (each trace sets its own)."""
    return [o for o in overrides if not o.lstrip("+~").startswith("workload=")]


class ProvisioningRun:
    """Bisects every candidate once (a candidate both budgets buy is simulated once) and keeps the rows."""

    def __init__(self, params: ProvisioningParams, machines: Mapping[str, MachineType]) -> None:
        self.params = params
        self.machines = machines
        self.n_simulations = 0
        self.sim_wall_s = 0.0
        self.rows: list[dict[str, Any]] = []
        self.probes: list[dict[str, Any]] = []
        self.records: dict[int, tuple[Any, ...]] = {}  # row index -> records at the highest passing rate
        self._done: dict[tuple[Any, ...], tuple[RateSearch[Probe], int]] = {}

    def evaluate(self, cluster: SimulatedCluster, plan: TracePlan, rate: float) -> tuple[bool, Probe]:
        """Simulate ``rate`` and judge it by the criterion."""
        point = simulate(cluster, at_rate(plan.requests, rate))
        self.n_simulations += 1
        self.sim_wall_s += point.wall_s
        m = point.metrics
        slow = slowdown_percentiles(request_frame(point.records), plan.reference, self.params.quantiles)
        if self.params.criterion == "splitwise_slowdown":
            ok = meets_slowdowns(slow, self.params)
        else:
            ok = bool(m["meets_attainment_target"])
        row = {"rate_rps": rate, "passes": ok, **slow, "slo_attainment": m["slo_attainment"],
               "request_throughput_rps": m["request_throughput_rps"], "n_ok": m["n_ok"], "n_issued": m["n_issued"],
               **{k: m[k] for k in ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms",
                                    "median_e2e_ms", "p99_e2e_ms")},
               **{f"sim_{k}": v for k, v in point.info.items() if k.startswith("utilization")},
               "sim_wall_s": point.wall_s}
        return ok, Probe(row, point.records)

    def design_rows(self, plan: TracePlan, kind: str, budget: float, design: Design, cfg: Config) -> None:
        """Rows of every candidate ``design`` can buy with ``budget`` of ``kind``."""
        p = self.params
        ident = {"trace": plan.trace, "budget": kind, "budget_value": budget,
                 "budget_unit": "usd_per_hr" if kind == "cost" else "kw",
                 "budget_a100_machines": p.budget_a100_machines, "design": design.label, "system": design.system,
                 "prompt_hardware": design.hardware.get("prefill", design.hardware.get("colocated")),
                 "token_hardware": design.hardware.get("decode", design.hardware.get("colocated")),
                 "mixed_hardware": design.hardware.get("mixed")}
        candidates = enumerate_candidates(design, self.machines, kind, budget, p.max_splits)
        if not candidates:
            log.warning("%s: %s cannot afford one machine per pool within the %s budget (%.4g)",
                        plan.trace, design.label, kind, budget)
            self.rows.append({**ident, "feasible": False, "split": "", "n_machines": 0, "max_rate_rps": 0.0})
            return
        hint: Optional[float] = None
        for cand in candidates:
            key = (plan.trace, design.label, tuple(sorted(cand.counts.items())))
            reused = key in self._done
            if not reused:
                cluster = SimulatedCluster(candidate_config(cfg, cand))
                guess = hint or p.initial_rate_per_machine_rps * cand.n_machines
                result = search_max_rate(lambda r, c=cluster: self.evaluate(c, plan, r), guess, growth=2.0,
                                         steps=p.bisect_steps, midpoint="arithmetic", max_expand=p.max_expand)
                self._done[key] = (result, cluster.n_gpus)
                self.probes.extend({**ident, "split": cand.split(), **probe.row} for _, _, probe in result.probes)
            result, n_gpus = self._done[key]
            hint = result.rate_rps or hint
            cost = cand.total(design, self.machines, "cost")
            power = cand.total(design, self.machines, "power")
            best = result.best
            self.records[len(self.rows)] = best.records if best is not None else ()
            self.rows.append({
                **ident, "feasible": True, "split": cand.split(), "n_colocated": cand.counts.get("colocated", 0),
                "n_prompt": cand.counts.get("prefill", 0), "n_token": cand.counts.get("decode", 0),
                "n_mixed": cand.counts.get("mixed", 0), "n_machines": cand.n_machines, "n_gpus": n_gpus,
                "cost_usd_hr": cost, "power_kw": power,
                "budget_used_fraction": (cost if kind == "cost" else power) / budget,
                "max_rate_rps": result.rate_rps, "rate_upper_rps": result.upper_rps,
                "throughput_per_usd_hr": result.rate_rps / cost, "throughput_per_kw": result.rate_rps / power,
                "n_probes": len(result.probes), "reused": reused, "criterion": p.criterion,
                "max_requests": len(plan.requests),
                **{f"at_max_{k}": v for k, v in (best.row if best else {}).items() if k not in ("rate_rps", "passes")},
                "overrides": " ".join([f"workload={plan.trace}", *design.overrides, *cand.overrides()]),
            })
            log.info("%s %s %s %s: max %.3g req/s (%.4g $/hr, %.4g kW, %d probes%s)", plan.trace, kind,
                     design.label, cand.split(), result.rate_rps, cost, power, len(result.probes),
                     ", reused" if reused else "")


def choose(table: pd.DataFrame, reference_design: str) -> pd.DataFrame:
    """Mark the best feasible candidate per trace x budget x design (highest rate, then lower budget use,
    then fewer machines) and add ratios against ``reference_design``'s chosen candidate."""
    table = table.copy()
    table["chosen"] = False
    order = table.assign(_used=table["budget_used_fraction"].fillna(np.inf)).sort_values(
        ["max_rate_rps", "_used", "n_machines"], ascending=[False, True, True], kind="mergesort")
    best = order[order["feasible"].astype(bool)].groupby(["trace", "budget", "design"], sort=False).head(1).index
    table.loc[best, "chosen"] = True
    keys = pd.MultiIndex.from_frame(table[["trace", "budget"]])
    for col, name in (("max_rate_rps", "throughput"), ("throughput_per_usd_hr", "per_usd_hr"),
                      ("throughput_per_kw", "per_kw")):
        ref = table[table["chosen"] & (table["design"] == reference_design)].set_index(["trace", "budget"])[col]
        with np.errstate(divide="ignore", invalid="ignore"):
            table[f"{name}_vs_{reference_design}"] = (table[col].to_numpy(dtype=float)
                                                     / ref.reindex(keys).to_numpy(dtype=float))
    return table


def plan_traces(cfg: Config, params: ProvisioningParams, machines: dict[str, MachineType]) -> list[TracePlan]:
    """Compose and check every design on every trace (before any simulation); fills ``machines``."""
    base = _workload_free(job_overrides())
    plans = []
    for trace in params.traces:
        designs = []
        for label, overrides in cfg.study.variants.items():
            vcfg = compose_variant([*base, f"workload={trace}", *overrides])
            design = design_from_config(label, overrides, vcfg, params.gpus_per_machine)
            for hw in design.hardware.values():
                if hw not in machines:
                    machines[hw] = machine_type(hw, params.gpus_per_machine, params.machine_power_w)
            designs.append((design, vcfg))
        first = designs[0][1]
        if len({vcfg.model.name for _, vcfg in designs}) != 1:
            raise ConfigError("study.variants: every design must serve the same model")
        plans.append(TracePlan(trace, designs, unit_rate_requests(first, cfg.study.max_requests),
                               reference_model(first, params)))
    return plans


def run_splitwise_provisioning(cfg: Config, folder: RunFolder) -> JobResult:
    study = cfg.study
    params = ProvisioningParams.from_mapping(study.params)
    if not study.variants:
        raise ConfigError("study.variants: splitwise_provisioning needs the designs (label -> overrides)")
    budget_machine = machine_type(params.budget_hardware, params.gpus_per_machine, params.machine_power_w)
    machines = {budget_machine.hardware: budget_machine}
    plans = plan_traces(cfg, params, machines)
    run = ProvisioningRun(params, machines)
    start = time.perf_counter()
    jobs = [(plan, kind, design, vcfg) for plan in plans for kind in params.budgets for design, vcfg in plan.designs]
    for plan, kind, design, vcfg in tqdm(jobs, desc="designs x budgets", unit="design",
                                         disable=not cfg.engine.progress):
        run.design_rows(plan, kind, params.budget_a100_machines * budget_machine.resource(kind), design, vcfg)

    table = choose(pd.DataFrame(run.rows), params.reference_design)
    folder.write_table(STUDY_FILE, table)
    folder.write_table(PROBES_FILE, pd.DataFrame(run.probes))
    files = {"study": STUDY_FILE, "probes": PROBES_FILE}
    frames = []
    for index in table.index[table["chosen"]]:
        if run.records.get(int(index)):
            frame = records_frame(run.records[int(index)])
            for i, key in enumerate(("trace", "budget", "design", "split")):
                frame.insert(i, key, table.at[index, key])
            frames.append(frame)
    if frames:
        folder.write_table(REQUESTS_FILE, pd.concat(frames, ignore_index=True))
        files["requests"] = REQUESTS_FILE
    ref = params.reference_design
    summary_cols = ["split", "n_machines", "max_rate_rps", "cost_usd_hr", "power_kw", "throughput_per_usd_hr",
                    "throughput_per_kw", f"throughput_vs_{ref}", f"per_usd_hr_vs_{ref}", f"per_kw_vs_{ref}"]
    chosen = {f"{r['trace']}/{r['budget']}/{r['design']}": {c: _plain(r.get(c)) for c in summary_cols}
              for _, r in table[table["chosen"]].iterrows()}
    metrics = {"study": study.kind, "figure": study.figure, "criterion": params.criterion,
               "n_candidates": int(table["feasible"].astype(bool).sum()), "n_simulations": run.n_simulations,
               "simulation_wall_s": run.sim_wall_s, "wall_s": time.perf_counter() - start, "chosen": chosen}
    return JobResult(metrics=metrics, files=files, tables={"study": table})


def _plain(value: Any) -> Any:
    """JSON-able scalar (NaN/inf -> None)."""
    if isinstance(value, np.integer):
        return int(value)
