"""The rate searches of the Splitwise provisioning study: the requests at a rate, one probe (a simulation
judged by the SLO), and every candidate split of a design bisected for its highest passing rate.

Candidates of a design are searched from the middle of the split range outwards. With
``prune_dominated`` only the first gets a full search; each later one is probed first at the best rate
its design reached so far: if it fails there it cannot be the design's best (passing is taken to be
monotone in the rate, as every bisection here assumes), its row says so (``pruned``, ``max_rate_rps``
empty, ``rate_upper_rps`` that rate) and it costs one simulation; if it passes, the search continues
upwards from there in steps of ``refine_growth``.

Pruning and reuse (a split both budgets buy is searched once) tie the candidates of one design on one
trace together, and nothing else does: :func:`search_design` runs one design on one trace, every budget in
order, as one probe-pool task (:mod:`harness.probe_pool`) on a fresh :class:`ProvisioningRun`, and
:meth:`ProvisioningRun.add` merges its rows and probes back in the order an in-process run writes them.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from harness.capacity import RateSearch, search_max_rate
from harness.config import Config
from harness.metrics import request_frame
from harness.studies.simulate import load_requests, point_workload, simulate
from harness.studies.splitwise_provisioning.early_stop import SlowdownStop
from harness.studies.splitwise_provisioning.machines import (
    Candidate,
    Design,
    MachineType,
    candidate_config,
    enumerate_candidates,
)
from harness.studies.splitwise_provisioning.params import MAIN_SCENARIO, ProvisioningParams
from harness.studies.splitwise_provisioning.slowdown import (
    UncontendedReference,
    meets_slowdowns,
    slowdown_percentiles,
)
from systems.sim.simulated_deployment import SimulatedDeployment
from vocab.records import RequestRecord
from workloads.base import WorkloadRequests

log = logging.getLogger(__name__)
NOT_AT_MAX = ("rate_rps", "passes", "stopped_early", "stopped_at_s")  # probe columns study.csv does not repeat


def unit_rate_requests(cfg: Config, max_requests: Optional[int]) -> WorkloadRequests:
    """The trace prefix with Poisson arrivals at 1 req/s."""
    return load_requests(cfg, point_workload(cfg, rate_rps=1.0, max_requests=max_requests))


def at_rate(base: WorkloadRequests, rate_rps: float) -> WorkloadRequests:
    """``base`` (a 1 req/s Poisson schedule) at ``rate_rps``: every arrival divided by the rate."""
    specs = tuple(dataclasses.replace(s, arrival_s=s.arrival_s / rate_rps) for s in base.specs)
    schedule = dataclasses.replace(base.schedule, offered_rate_rps=base.schedule.offered_rate_rps * rate_rps,
                                   duration_s=base.schedule.duration_s / rate_rps)
    return dataclasses.replace(base, specs=specs, schedule=schedule)


def middle_out(n: int) -> list[int]:
    """Indices ``0..n-1`` from the middle outwards (``[1, 2, 0, 3]`` for 4): the extremes of a split range
    (one prompt or one token machine) are rarely best, so the best rate is found early."""
    mid = (n - 1) / 2
    return sorted(range(n), key=lambda i: (abs(i - mid), i))


@dataclass
class Probe:
    """One simulation of a bisection: its table row (records are not kept: a chosen candidate is simulated
    again at its highest passing rate, :meth:`ProvisioningRun.records_of`)."""

    row: dict[str, Any]


@dataclass
class TracePlan:
    """One trace's composed designs, requests and uncontended reference (in one scenario)."""

    trace: str
    designs: list[tuple[Design, Any]]
    requests: WorkloadRequests
    reference: UncontendedReference
    scenario: str = MAIN_SCENARIO


@dataclass
class Searched:
    """A candidate's search: the result, the cluster's GPUs, and the rate it was pruned at (0: not pruned)."""

    result: RateSearch[Probe]
    n_gpus: int
    pruned_at: float = 0.0


class ProvisioningRun:
    """Bisects every candidate once (a candidate both budgets buy is simulated once) and keeps the rows."""

    def __init__(self, params: ProvisioningParams, machines: Mapping[str, MachineType]) -> None:
        self.params = params
        self.machines = machines
        self.n_simulations = 0
        self.sim_wall_s = 0.0
        self.rows: list[dict[str, Any]] = []
        self.probes: list[dict[str, Any]] = []
        self.sources: dict[int, tuple[Config, Candidate, TracePlan]] = {}  # row index -> what it simulated
        self._done: dict[tuple[Any, ...], Searched] = {}

    def evaluate(self, deployment: SimulatedDeployment, plan: TracePlan, rate: float) -> tuple[bool, Probe]:
        """Simulate ``rate`` and judge it by the criterion (with ``early_stop``, a probe of the Splitwise SLO
        stops once it has provably failed: :mod:`.early_stop`)."""
        requests = at_rate(plan.requests, rate)
        stop = (SlowdownStop(requests, plan.reference, self.params)
                if self.params.early_stop and self.params.criterion == "splitwise_slowdown" else None)
        point = simulate(deployment, requests, stop=stop)
        self.n_simulations += 1
        self.sim_wall_s += point.wall_s
        if point.info.get("stopped_early"):  # failed, decided part-way: the partial run's metrics describe nothing
            return False, Probe({"rate_rps": rate, "passes": False, "stopped_early": point.info["stopped_early"],
                                 "stopped_at_s": point.info["stopped_at_s"], "sim_wall_s": point.wall_s})
        m = point.metrics
        frame = request_frame(point.columns if point.columns is not None else point.records)
        slow = slowdown_percentiles(frame, plan.reference, self.params.quantiles)
        if self.params.criterion == "splitwise_slowdown":
            ok = meets_slowdowns(slow, self.params)
        else:
            ok = bool(m["meets_attainment_target"])
        info = point.info
        row = {"rate_rps": rate, "passes": ok, **slow, "slo_attainment": m["slo_attainment"],
               "request_throughput_rps": m["request_throughput_rps"], "n_ok": m["n_ok"], "n_issued": m["n_issued"],
               **{k: m[k] for k in ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms",
                                    "median_e2e_ms", "p99_e2e_ms")},
               **{f"sim_{k}": v for k, v in info.items() if k.startswith("utilization")},
               **{f"sim_n_{k}": info.get(f"n_{k}", 0) for k in ("mixed_prompts", "mixed_decodes",
                                                                "lent_token_machines", "lent_prompt_machines")},
               "sim_wall_s": point.wall_s, "stopped_early": "", "stopped_at_s": math.nan}
        return ok, Probe(row)

    def _search(self, deployment: SimulatedDeployment, plan: TracePlan, guess: float, best: float) -> Searched:
        """A full search from ``guess``, or (``best`` > 0 and pruning) one that starts at ``best`` and stops
        there when that fails."""
        p = self.params

        def evaluate(rate: float) -> tuple[bool, Probe]:
            return self.evaluate(deployment, plan, rate)

        if p.prune_dominated and best > 0:
            result = search_max_rate(evaluate, best, growth=p.refine_growth, steps=p.bisect_steps,
                                     midpoint="arithmetic", rel_tol=p.rate_rel_tol, max_expand=p.max_expand,
                                     min_rate_rps=best)
            return Searched(result, deployment.n_gpus, best if result.rate_rps == 0 else 0.0)
        result = search_max_rate(evaluate, guess, growth=2.0, steps=p.bisect_steps, midpoint="arithmetic",
                                 rel_tol=p.rate_rel_tol, max_expand=p.max_expand)
        return Searched(result, deployment.n_gpus)

    def design_rows(self, plan: TracePlan, kind: str, budget: float, design: Design, cfg: Config,
                    candidates: list[Candidate]) -> None:
        """Rows of every candidate of ``design`` within ``budget`` of ``kind`` (``candidates``, enumerated)."""
        p = self.params
        ident = {"scenario": plan.scenario, "trace": plan.trace, "budget": kind, "budget_value": budget,
                 "budget_unit": "usd_per_hr" if kind == "cost" else "kw", "budget_machines": p.budget_machines,
                 "budget_hardware": p.budget_hardware, "design": design.label, "system": design.system,
                 "prompt_hardware": design.hardware.get("prefill", design.hardware.get("colocated")),
                 "token_hardware": design.hardware.get("decode", design.hardware.get("colocated")),
                 "mixed_hardware": design.hardware.get("mixed")}
        if not candidates:
            log.warning("%s: %s cannot afford one machine per pool within the %s budget (%.4g)",
                        plan.trace, design.label, kind, budget)
            self.rows.append({**ident, "feasible": False, "split": "", "n_machines": 0, "max_rate_rps": 0.0})
            return
        best = 0.0
        searched: dict[int, tuple[Searched, bool]] = {}
        for i in middle_out(len(candidates)):
            cand = candidates[i]
            key = (plan.scenario, plan.trace, design.label, tuple(sorted(cand.counts.items())))
            done = self._done.get(key)
            # a result pruned against a higher best (the other budget's) says too little here: search again
            reused = done is not None and not (done.pruned_at > best)
            if not reused:
                deployment = SimulatedDeployment(candidate_config(cfg, cand))
                guess = p.initial_rate_per_machine_rps * cand.n_machines
                done = self._search(deployment, plan, guess, best)
                self._done[key] = done
                self.probes.extend({**ident, "split": cand.split(), **probe.row} for _, _, probe in done.result.probes)
            assert done is not None
            best = max(best, done.result.rate_rps)
            searched[i] = (done, reused)
        for i, cand in enumerate(candidates):
            done, reused = searched[i]
            self.sources[len(self.rows)] = (cfg, cand, plan)
            self._row(ident, design, cand, kind, budget, done, reused, len(plan.requests))

    def _row(self, ident: dict[str, Any], design: Design, cand: Candidate, kind: str, budget: float,
             done: Searched, reused: bool, n_requests: int) -> None:
        result = done.result
        cost = cand.total(design, self.machines, "cost")
        power = cand.total(design, self.machines, "power")
        pruned = done.pruned_at > 0
        rate = math.nan if pruned else result.rate_rps
        best = result.best
        self.rows.append({
            **ident, "feasible": True, "split": cand.split(), "n_colocated": cand.counts.get("colocated", 0),
            "n_prompt": cand.counts.get("prefill", 0), "n_token": cand.counts.get("decode", 0),
            "n_mixed": cand.counts.get("mixed", 0), "n_machines": cand.n_machines, "n_gpus": done.n_gpus,
            "cost_usd_hr": cost, "power_kw": power,
            "budget_used_fraction": (cost if kind == "cost" else power) / budget,
            "max_rate_rps": rate, "rate_upper_rps": done.pruned_at if pruned else result.upper_rps,
            "pruned": pruned, "throughput_per_usd_hr": rate / cost, "throughput_per_kw": rate / power,
            "n_probes": len(result.probes), "reused": reused, "criterion": self.params.criterion,
            "max_requests": n_requests,
            **{f"at_max_{k}": v for k, v in (best.row if best else {}).items() if k not in NOT_AT_MAX},
            "overrides": " ".join([f"workload={ident['trace']}", *design.overrides, *cand.overrides()]),
        })
        log.info("%s %s %s %s %s: %s (%.4g $/hr, %.4g kW, %d probes%s)", ident["scenario"], ident["trace"], kind,
                 design.label, cand.split(), f"below {done.pruned_at:.3g} req/s (pruned)" if pruned
                 else f"max {result.rate_rps:.3g} req/s", cost, power, len(result.probes), ", reused" if reused else "")

    def add(self, task: DesignTask, outcome: DesignOutcome, budget_index: int) -> None:
        """Append what ``task`` found for its ``budget_index``-th budget (rows, with their sources, and
        probes) as :meth:`design_rows` would have, in this process."""
        _, _, candidates = task.budgets[budget_index]
        rows, probes = outcome.parts[budget_index]
        for j, row in enumerate(rows):
            if candidates:  # one row per candidate, in order; an infeasible design's one row has no source
                self.sources[len(self.rows)] = (task.cfg, candidates[j], task.plan)
            self.rows.append(row)
        self.probes.extend(probes)

    def count(self, outcome: DesignOutcome) -> None:
        """Add a task's simulations and their wall time to this run's."""
        self.n_simulations += outcome.n_simulations
        self.sim_wall_s += outcome.sim_wall_s

    def records_of(self, row: int, rate: float) -> tuple[RequestRecord, ...]:
        """The records of row ``row``'s candidate at ``rate`` (the simulation is deterministic: the same
        records as its probe at that rate)."""
        cfg, cand, plan = self.sources[row]
        return candidate_records((cfg, cand, plan.requests, rate))


@dataclass(frozen=True)
class DesignTask:
    """One probe-pool task: ``design`` (composed as ``cfg``) on ``plan``'s trace, for each budget
    ``(kind, budget, candidates)`` in order."""

    plan: TracePlan
    design: Design
    cfg: Config
    budgets: tuple[tuple[str, float, tuple[Candidate, ...]], ...]


@dataclass
class DesignOutcome:
    """What a :class:`DesignTask` found: per budget, its rows and probes; its simulations and their time."""

    parts: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]
    n_simulations: int
    sim_wall_s: float


def search_design(params: ProvisioningParams, machines: Mapping[str, MachineType], task: DesignTask) -> DesignOutcome:
    """Run ``task`` on a fresh :class:`ProvisioningRun` (the budgets in order, so a split both buy is
    searched once, as in one run)."""
    run = ProvisioningRun(params, machines)
    parts = []
    for kind, budget, candidates in task.budgets:
        rows, probes = len(run.rows), len(run.probes)
        run.design_rows(task.plan, kind, budget, task.design, task.cfg, list(candidates))
        parts.append((run.rows[rows:], run.probes[probes:]))
    return DesignOutcome(parts, run.n_simulations, run.sim_wall_s)


def candidate_records(item: tuple[Config, Candidate, WorkloadRequests, float]) -> tuple[RequestRecord, ...]:
    """The records of ``(cfg, candidate, unit-rate requests, rate)`` simulated at that rate (a probe-pool task)."""
    cfg, cand, requests, rate = item
    return tuple(simulate(SimulatedDeployment(candidate_config(cfg, cand)), at_rate(requests, rate)).records)


def design_tasks(params: ProvisioningParams, plans: Sequence[TracePlan], machines: Mapping[str, MachineType],
                 budget_machine: MachineType, budgets: Sequence[str]) -> list[DesignTask]:
    """One task per trace and design (trace-major, designs in order) with the candidates each of
    ``budgets`` buys (``budget_machines`` of ``budget_machine``)."""
    tasks = []
    for plan in plans:
        for design, vcfg in plan.designs:
            per_budget = []
            for kind in budgets:
                budget = params.budget_machines * budget_machine.resource(kind)
                candidates = enumerate_candidates(design, machines, kind, budget, params.max_splits)
                per_budget.append((kind, budget, tuple(candidates)))
            tasks.append(DesignTask(plan, design, vcfg, tuple(per_budget)))
    return tasks


def merge_outcomes(run: ProvisioningRun, tasks: Sequence[DesignTask], outcomes: Sequence[DesignOutcome]) -> None:
    """Add every task's rows and probes to ``run`` in the order an in-process run appends them: trace,
    then budget, then design."""
    traces: dict[int, list[tuple[DesignTask, DesignOutcome]]] = {}
    for task, outcome in zip(tasks, outcomes, strict=True):
        run.count(outcome)
        traces.setdefault(id(task.plan), []).append((task, outcome))
    for group in traces.values():  # insertion order: the plans' order
        for b in range(len(group[0][0].budgets)):
            for task, outcome in group:
                run.add(task, outcome, b)
