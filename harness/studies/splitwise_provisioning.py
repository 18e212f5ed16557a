"""``job=sim_study study.kind=splitwise_provisioning``: Splitwise's (ISCA'24, arXiv 2311.18677) throughput
per cost and per watt. For an iso-cost and an iso-power budget, every design gets the machines the budget
buys, each candidate machine split is bisected for the highest Poisson request rate that meets the SLO,
and the best candidate per design is reported with its cost, power and throughput per $/hr and per kW.

**Designs** are ``study.variants`` (label -> Hydra overrides), e.g. ``baseline_a100`` (``system=vllm_baseline``,
``engine.colocated.hardware=a100_80gb``) or ``splitwise_ha`` (``system=splitwise``, prompt pool
``engine.prefill.hardware=h100_80gb``, token pool ``engine.decode.hardware=a100_80gb``). A *machine* is one
instance of ``gpus_per_machine`` GPUs (a DGX: Llama-2-70B at TP 8, ``engine.perf_model=splitwise``): each
pool's ``tp x pp`` must equal it. A design's ``system.mixed_instances`` (a static mixed pool) is kept fixed
and paid for; the prompt:token split (or the colocated count) is what the study enumerates. Every candidate
is the job's own overrides plus ``workload=<trace>``, the design's overrides and ``system.<role>_instances=<n>``
(the ``overrides`` column holds all but the job's own), so it can be rerun on its own with ``job=serve``.

**Cost and power** per machine are ``gpus_per_machine x`` the hardware YAML's ``price_per_hour_usd`` and
``power_w``: $17.6/hr and 3.2 kW per DGX-A100, $38/hr and 5.6 kW per DGX-H100, $38/hr and 3.92 kW per
power-capped DGX-H100 (Splitwise Table I: 400 W / 700 W per GPU, $17.6 / $38 per machine-hour; HHcap caps
token machines at 70% power). The GPU-TDP basis is the one Splitwise's provisioning uses: its iso-power
cluster pairs 70 DGX-A100 with 40 DGX-H100 (70 x 3.2 kW = 40 x 5.6 kW; splitwise-sim's notebooks use a
44 : 24.8 H100 : A100 power ratio, 1.77), whereas splitwise-sim's SKU TDPs (6,500 / 10,200 / 7,140 W)
give 455 kW against 408 kW. ``params.machine_power_w`` replaces it per hardware (e.g. the SKU TDPs).

**Budgets**: ``budget_a100_machines`` machines of ``budget_hardware`` (their cost for ``cost``, their
power for ``power``). Baselines get as many machines as fit; Splitwise designs get every Pareto-maximal
(prompt, token) split that fits (one more machine of either pool would not), thinned evenly to at most
``max_splits``. A design that cannot afford one machine per pool gets an infeasible row.

**SLO** (``params.criterion``):

- ``splitwise_slowdown`` (default; Splitwise Table VI, splitwise-sim ``notebooks/plots.ipynb``): per-request
  slowdowns against the same request served alone on ``reference_hardware`` (DGX-A100, TP 8) must have
  p50/p90/p99 of at most 2/3/6 (TTFT) and 1.25/1.5/5 (TBT and E2E); all nine must hold. The uncontended
  latencies come from the reference pool's performance model: TTFT = one prefill of the whole prompt;
  TBT = one batch-1 decode step at the request's mean context (prompt + output / 2; splitwise-sim indexes
  its token time by the prompt size); E2E = TTFT + TBT x (output - 1). A request's TBT is its mean token
  interval (TPOT; undefined for one output token, then left out of the TBT percentiles). Failed, rejected
  and unfinished requests count as a slowdown of 1e9.
- ``attainment``: ``slo_attainment`` under the composed ``slo`` group must reach ``slo.attainment_target``.

**Rates**: the first ``study.max_requests`` requests of the trace (Azure LLM inference 2023 lengths, capped
to the model context) with Poisson arrivals (``workload.arrival.seed``). The rate-1 schedule is built once
per trace and scaled by 1/rate (exactly what ``point_workload`` composes, tested), so every rate sees the
same arrival pattern. The bisection brackets from a guess (the best rate found for the design's previous
candidate, else ``initial_rate_per_machine_rps x machines``) by doubling or halving (``max_expand`` times),
then halves the bracket ``bisect_steps`` times; ``max_rate_rps`` is the highest passing rate and
``rate_upper_rps`` the lowest failing one. A short prefix reaches steady state only roughly: near capacity
it overstates the sustainable rate; every design is measured the same way.

Writes ``study.csv`` (one row per trace x budget x design x candidate, ``chosen`` marks the best per
trace x budget x design: highest rate, then lower budget use, then fewer machines; ``<x>_vs_<reference_design>``
ratios; ``at_max_*`` the SLO percentiles and latencies at ``max_rate_rps``; a candidate both budgets buy is
bisected once, ``reused`` on its second row), ``probes.csv`` (every simulation of the bisections) and
``requests.parquet`` (the records of each chosen candidate at its highest passing rate). Throughput is the
offered Poisson rate (req/s) the SLO holds at; ``throughput_per_usd_hr`` is req/s per $/hr of machines and
``throughput_per_kw`` req/s per kW of machine power.

``study.params`` (defaults in ``DEFAULT_PARAMS``): ``traces`` (workload group names), ``budgets``
(``cost``/``power``), ``budget_a100_machines``, ``budget_hardware``, ``gpus_per_machine``,
``machine_power_w``, ``max_splits``, ``bisect_steps``, ``max_expand``, ``initial_rate_per_machine_rps``,
``criterion``, ``reference_hardware``, ``reference_tp``, ``quantiles``, ``slowdown_bounds``,
``reference_design``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Optional, TypeVar

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from harness.config import ConfigError
from harness.jobs import JobResult
from harness.metrics import percentiles, request_frame
from harness.results import REQUESTS_FILE, RunFolder, records_frame
from harness.studies.simulate import SimCluster, load_requests, point_workload, simulate
from harness.studies.variants import compose_variant, job_overrides
from systems.sim.hardware_catalog import load_hardware
from systems.sim.perf.base import InstanceShape, PerfModel
from systems.sim.perf.registry import build_perf_model
from workloads.base import WorkloadRequests

log = logging.getLogger(__name__)

STUDY_FILE = "study.csv"
PROBES_FILE = "probes.csv"
BUDGET_KINDS = ("cost", "power")
CRITERIA = ("splitwise_slowdown", "attainment")
FAILED_SLOWDOWN = 1e9  # slowdown of a request that did not finish ok
SLOWDOWN_METRICS = ("ttft", "tbt", "e2e")
# Splitwise Table VI: slowdown bounds at p50 / p90 / p99 against DGX-A100 without contention.
SPLITWISE_SLOWDOWN_BOUNDS: Mapping[str, tuple[float, ...]] = {
    "ttft": (2.0, 3.0, 6.0), "tbt": (1.25, 1.5, 5.0), "e2e": (1.25, 1.5, 5.0)}
DEFAULT_PARAMS: dict[str, Any] = {
    "traces": ["azure_code", "azure_conv"],
    "budgets": list(BUDGET_KINDS),
    "budget_a100_machines": 7,
    "budget_hardware": "a100_80gb",
    "gpus_per_machine": 8,
    "machine_power_w": {},
    "max_splits": 8,
    "bisect_steps": 6,
    "max_expand": 8,
    "initial_rate_per_machine_rps": 1.0,
    "criterion": "splitwise_slowdown",
    "reference_hardware": "a100_80gb",
    "reference_tp": 8,
    "quantiles": [50.0, 90.0, 99.0],
    "slowdown_bounds": {k: list(v) for k, v in SPLITWISE_SLOWDOWN_BOUNDS.items()},
    "reference_design": "baseline_a100",
}
FIT_TOLERANCE = 1e-9  # relative slack when comparing a total with the budget (7 x 3.2 kW == 4 x 5.6 kW)


# --------------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProvisioningParams:
    """``study.params`` of this study, checked (see the module docstring)."""

    traces: tuple[str, ...]
    budgets: tuple[str, ...]
    budget_a100_machines: float
    budget_hardware: str
    gpus_per_machine: int
    machine_power_w: Mapping[str, float]
    max_splits: int
    bisect_steps: int
    max_expand: int
    initial_rate_per_machine_rps: float
    criterion: str
    reference_hardware: str
    reference_tp: int
    quantiles: tuple[float, ...]
    slowdown_bounds: Mapping[str, tuple[float, ...]]
    reference_design: str

    @classmethod
    def from_mapping(cls, params: Mapping[str, Any]) -> ProvisioningParams:
        unknown = sorted(set(params) - set(DEFAULT_PARAMS))
        if unknown:
            raise ConfigError(f"study.params: unknown key(s) {', '.join(unknown)} for splitwise_provisioning; "
                              f"known: {', '.join(DEFAULT_PARAMS)}")
        p = {**DEFAULT_PARAMS, **dict(params)}
        bounds = {str(k): tuple(float(x) for x in v) for k, v in dict(p["slowdown_bounds"]).items()}
        out = cls(traces=tuple(str(t) for t in p["traces"]), budgets=tuple(str(b) for b in p["budgets"]),
                  budget_a100_machines=float(p["budget_a100_machines"]), budget_hardware=str(p["budget_hardware"]),
                  gpus_per_machine=int(p["gpus_per_machine"]),
                  machine_power_w={str(k): float(v) for k, v in dict(p["machine_power_w"]).items()},
                  max_splits=int(p["max_splits"]), bisect_steps=int(p["bisect_steps"]),
                  max_expand=int(p["max_expand"]),
                  initial_rate_per_machine_rps=float(p["initial_rate_per_machine_rps"]),
                  criterion=str(p["criterion"]), reference_hardware=str(p["reference_hardware"]),
                  reference_tp=int(p["reference_tp"]), quantiles=tuple(float(q) for q in p["quantiles"]),
                  slowdown_bounds=bounds, reference_design=str(p["reference_design"]))
        out.check()
        return out

    def check(self) -> None:
        if not self.traces:
            raise ConfigError("study.params.traces: give at least one workload group name")
        bad = [b for b in self.budgets if b not in BUDGET_KINDS]
        if bad or not self.budgets:
            raise ConfigError(f"study.params.budgets: expected a non-empty list of {', '.join(BUDGET_KINDS)}, "
                              f"got {list(self.budgets)}")
        if self.criterion not in CRITERIA:
            raise ConfigError(f"study.params.criterion: expected one of {', '.join(CRITERIA)}, got {self.criterion!r}")
        for key in ("budget_a100_machines", "gpus_per_machine", "max_splits", "initial_rate_per_machine_rps",
                    "reference_tp"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"study.params.{key}: must be > 0, got {getattr(self, key)}")
        for key in ("bisect_steps", "max_expand"):
            if getattr(self, key) < 0:
                raise ConfigError(f"study.params.{key}: must be >= 0, got {getattr(self, key)}")
        if sorted(self.slowdown_bounds) != sorted(SLOWDOWN_METRICS):
            raise ConfigError(f"study.params.slowdown_bounds: needs exactly the keys {', '.join(SLOWDOWN_METRICS)}")
        for key, values in self.slowdown_bounds.items():
            if len(values) != len(self.quantiles) or not all(v > 0 for v in values):
                raise ConfigError(f"study.params.slowdown_bounds.{key}: needs {len(self.quantiles)} bounds > 0 "
                                  f"(one per quantile), got {list(values)}")
        if not all(0 < q <= 100 for q in self.quantiles):
            raise ConfigError(f"study.params.quantiles: percentiles in (0, 100], got {list(self.quantiles)}")


# --------------------------------------------------------------------------------------------------
# Machines, designs and the candidates a budget buys
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MachineType:
    """One machine (a DGX) of one hardware type: its price and power."""

    hardware: str
    gpus: int
    cost_usd_hr: float
    power_kw: float

    def resource(self, kind: str) -> float:
        """The machine's cost ($/hr) or power (kW)."""
        return self.cost_usd_hr if kind == "cost" else self.power_kw


def machine_type(hardware: str, gpus: int = 8, power_w: Optional[Mapping[str, float]] = None) -> MachineType:
    """``gpus`` x the hardware YAML's price and power (``power_w`` replaces a machine's power, in W)."""
    hw = load_hardware(hardware)
    if hw.price_per_hour_usd is None or hw.power_w is None:
        raise ConfigError(f"hardware {hardware}: needs price_per_hour_usd and power_w for a provisioning study")
    watts = (power_w or {}).get(hardware, gpus * float(hw.power_w))
    return MachineType(hardware, gpus, gpus * float(hw.price_per_hour_usd), watts / 1e3)


@dataclass(frozen=True)
class Design:
    """A composed design: its system, the hardware of each pool, and which pool counts are enumerated."""

    label: str
    overrides: tuple[str, ...]
    system: str
    hardware: Mapping[str, str]  # role -> hardware name, for every role the design has
    fixed: Mapping[str, int]  # roles whose count the design sets (the mixed pool)

    @property
    def free_roles(self) -> tuple[str, ...]:
        return ("colocated",) if self.system == "vllm_baseline" else ("prefill", "decode")


def design_from_config(label: str, overrides: Sequence[str], cfg: Any, gpus_per_machine: int) -> Design:
    """Read a composed variant as a design; ``ConfigError`` unless every pool is one machine per instance."""
    system = cfg.system.name
    if system not in ("vllm_baseline", "splitwise"):
        raise ConfigError(f"study.variants.{label}: splitwise_provisioning compares system=vllm_baseline and "
                          f"system=splitwise designs, got system={system}")
    if cfg.engine.name != "sim":
        raise ConfigError(f"study.variants.{label}: needs engine=sim, got engine={cfg.engine.name}")
    roles = ["colocated"] if system == "vllm_baseline" else ["prefill", "decode"]
    fixed = {}
    if system == "splitwise" and cfg.system.mixed_instances:
        roles.append("mixed")
        fixed["mixed"] = int(cfg.system.mixed_instances)
    hardware = {}
    for role in roles:
        pool = getattr(cfg.engine, role)
        if pool.tp * pool.pp != gpus_per_machine:
            raise ConfigError(f"study.variants.{label}: engine.{role} runs tp={pool.tp} x pp={pool.pp}, but a "
                              f"machine is {gpus_per_machine} GPUs (one instance per machine)")
        hardware[role] = pool.hardware or cfg.hardware.name
    return Design(label, tuple(overrides), system, hardware, fixed)


@dataclass(frozen=True)
class Candidate:
    """Machine counts per pool role."""

    counts: Mapping[str, int]

    @property
    def n_machines(self) -> int:
        return sum(self.counts.values())

    def overrides(self) -> list[str]:
        return [f"system.{role}_instances={n}" for role, n in self.counts.items()]

    def split(self) -> str:
        """``7P/T`` for colocated machines, ``3P/4T`` (``+1M`` with a mixed pool) for Splitwise."""
        c = self.counts
        if "colocated" in c:
            return f"{c['colocated']}P/T"
        return f"{c['prefill']}P/{c['decode']}T" + (f"+{c['mixed']}M" if c.get("mixed") else "")

    def total(self, design: Design, machines: Mapping[str, MachineType], kind: str) -> float:
        return sum(n * machines[design.hardware[role]].resource(kind) for role, n in self.counts.items())


def _fits(total: float, budget: float) -> bool:
    return total <= budget * (1 + FIT_TOLERANCE)


def enumerate_candidates(design: Design, machines: Mapping[str, MachineType], kind: str, budget: float,
                         max_splits: int = 8) -> list[Candidate]:
    """Every Pareto-maximal count of the design's free pools within ``budget`` (of ``kind``), thinned
    evenly to ``max_splits``; [] when not even one machine per pool fits."""
    unit = {role: machines[hw].resource(kind) for role, hw in design.hardware.items()}
    left = budget - sum(n * unit[role] for role, n in design.fixed.items())
    if design.free_roles == ("colocated",):
        n = math.floor(left / unit["colocated"] * (1 + FIT_TOLERANCE))
        return [Candidate({"colocated": n})] if n >= 1 else []
    out = []
    p = 1
    while True:
        rest = left - p * unit["prefill"]
        t = math.floor(rest / unit["decode"] * (1 + FIT_TOLERANCE)) if rest > 0 else 0
        if t < 1:
            break
        if not _fits((p + 1) * unit["prefill"] + t * unit["decode"], left):  # maximal: no room for another prompt machine
            out.append(Candidate({"prefill": p, "decode": t, **design.fixed}))
        p += 1
    if len(out) > max_splits:
        keep = sorted({int(round(i)) for i in np.linspace(0, len(out) - 1, max_splits)})
        out = [out[i] for i in keep]
    return out


def candidate_config(cfg: Any, candidate: Candidate) -> Any:
    """``cfg`` with the candidate's pool counts (what composing ``candidate.overrides()`` on it gives)."""
    system = dataclasses.replace(cfg.system, **{f"{role}_instances": n for role, n in candidate.counts.items()})
    return dataclasses.replace(cfg, system=system)


# --------------------------------------------------------------------------------------------------
# Bisection
# --------------------------------------------------------------------------------------------------

T = TypeVar("T")


@dataclass
class BisectResult(Generic[T]):
    """Highest passing rate (0 when none passed), lowest failing rate (inf when none failed), every probe."""

    rate: float
    upper: float
    best: Optional[T]
    probes: list[tuple[float, bool, T]] = field(default_factory=list)


def bisect_max_rate(evaluate: Callable[[float], tuple[bool, T]], guess: float, steps: int = 6,
                    max_expand: int = 8) -> BisectResult[T]:
    """Highest ``rate`` with ``evaluate(rate)[0]`` true, for a predicate that holds below a threshold.

    Brackets from ``guess`` by doubling (while it passes) or halving (while it fails), at most
    ``max_expand`` times, then halves the bracket ``steps`` times.
    """
    if not guess > 0:
        raise ValueError(f"guess: must be > 0, got {guess}")
    result: BisectResult[T] = BisectResult(0.0, math.inf, None)

    def probe(rate: float) -> bool:
        ok, payload = evaluate(rate)
        result.probes.append((rate, ok, payload))
        if ok and rate > result.rate:
            result.rate, result.best = rate, payload
        if not ok:
            result.upper = min(result.upper, rate)
        return ok

    rate = guess
    if probe(rate):
        for _ in range(max_expand):
            rate *= 2
            if not probe(rate):
                break
    else:
        for _ in range(max_expand):
            rate /= 2
            if probe(rate):
                break
    if result.rate == 0.0 or math.isinf(result.upper):
        return result  # no bracket: nothing passed, or everything did up to the expansion limit
    for _ in range(steps):
        probe((result.rate + result.upper) / 2)
    return result


# --------------------------------------------------------------------------------------------------
# The SLO: slowdowns against an uncontended run
# --------------------------------------------------------------------------------------------------


class UncontendedReference:
    """Latencies of each request served alone on the reference pool (see the module docstring)."""

    def __init__(self, perf: PerfModel) -> None:
        self.perf = perf
        self._prefill_ms: dict[int, float] = {}

    def ttft_ms(self, input_length: np.ndarray) -> np.ndarray:
        out = np.empty(len(input_length))
        for i, n in enumerate(np.asarray(input_length, dtype=np.int64).tolist()):
            if n not in self._prefill_ms:
                self._prefill_ms[n] = 1e3 * self.perf.prefill_time_s(float(n), float(n) ** 2, 1)
            out[i] = self._prefill_ms[n]
        return out

    def tbt_ms(self, input_length: np.ndarray, output_length: np.ndarray) -> np.ndarray:
        context = np.asarray(input_length, dtype=float) + np.asarray(output_length, dtype=float) / 2
        return 1e3 * np.asarray(self.perf.decode_step_time_s(np.ones_like(context), context), dtype=float)

    def latencies_ms(self, input_length: np.ndarray, output_length: np.ndarray) -> dict[str, np.ndarray]:
        ttft = self.ttft_ms(input_length)
        tbt = self.tbt_ms(input_length, output_length)
        e2e = ttft + tbt * np.maximum(np.asarray(output_length, dtype=float) - 1, 0)
        return {"ttft": ttft, "tbt": tbt, "e2e": e2e}


def reference_model(cfg: Any, params: ProvisioningParams) -> UncontendedReference:
    hw = load_hardware(params.reference_hardware)
    shape = InstanceShape(hw.name, params.reference_tp)
    try:
        perf = build_perf_model(cfg.engine.perf_model, cfg.model, hw, shape, profiles_dir=cfg.engine.profiles_dir,
                                gpu_memory_utilization=cfg.engine.gpu_memory_utilization)
    except ValueError as exc:
        raise ConfigError(f"study.params.reference_hardware ({cfg.engine.perf_model} model): {exc}") from exc
    return UncontendedReference(perf)


def slowdown_percentiles(frame: pd.DataFrame, reference: UncontendedReference,
                         quantiles: Sequence[float]) -> dict[str, Optional[float]]:
    """``p<q>_<metric>_slowdown`` of every request in ``frame`` (a ``request_frame``)."""
    ok = frame["status"].to_numpy() == "ok"
    ref = reference.latencies_ms(frame["input_length"].to_numpy(), frame["output_length"].to_numpy())
    measured = {"ttft": frame["ttft_ms"].to_numpy(dtype=float), "tbt": frame["tpot_ms"].to_numpy(dtype=float),
                "e2e": frame["e2e_ms"].to_numpy(dtype=float)}
    out: dict[str, Optional[float]] = {}
    for metric in SLOWDOWN_METRICS:
        with np.errstate(divide="ignore", invalid="ignore"):
            slow = measured[metric] / ref[metric]
        slow = np.where(ok, slow, FAILED_SLOWDOWN)  # NaN TBT of one-token requests stays out (dropped)
        for q, value in zip(quantiles, percentiles(slow, quantiles), strict=True):
            out[f"p{q:g}_{metric}_slowdown"] = value
    return out


def meets_slowdowns(values: Mapping[str, Optional[float]], params: ProvisioningParams) -> bool:
    """All bounds hold (an undefined percentile, e.g. no multi-token request, holds vacuously)."""
    for metric, bounds in params.slowdown_bounds.items():
        for q, bound in zip(params.quantiles, bounds, strict=True):
            value = values.get(f"p{q:g}_{metric}_slowdown")
            if value is not None and value > bound:
                return False
    return True


# --------------------------------------------------------------------------------------------------
# Requests at a rate
# --------------------------------------------------------------------------------------------------


def unit_rate_requests(cfg: Any, max_requests: Optional[int]) -> WorkloadRequests:
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
        self._done: dict[tuple[Any, ...], tuple[BisectResult[Probe], int]] = {}

    def evaluate(self, cluster: SimCluster, plan: TracePlan, rate: float) -> tuple[bool, Probe]:
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

    def design_rows(self, plan: TracePlan, kind: str, budget: float, design: Design, cfg: Any) -> None:
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
                cluster = SimCluster(candidate_config(cfg, cand))
                guess = hint or p.initial_rate_per_machine_rps * cand.n_machines
                result = bisect_max_rate(lambda r, c=cluster: self.evaluate(c, plan, r), guess, p.bisect_steps,
                                         p.max_expand)
                self._done[key] = (result, cluster.n_gpus)
                self.probes.extend({**ident, "split": cand.split(), **probe.row} for _, _, probe in result.probes)
            result, n_gpus = self._done[key]
            hint = result.rate or hint
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
                "max_rate_rps": result.rate, "rate_upper_rps": result.upper,
                "throughput_per_usd_hr": result.rate / cost, "throughput_per_kw": result.rate / power,
                "n_probes": len(result.probes), "reused": reused, "criterion": p.criterion,
                "max_requests": len(plan.requests),
                **{f"at_max_{k}": v for k, v in (best.row if best else {}).items() if k not in ("rate_rps", "passes")},
                "overrides": " ".join([f"workload={plan.trace}", *design.overrides, *cand.overrides()]),
            })
            log.info("%s %s %s %s: max %.3g req/s (%.4g $/hr, %.4g kW, %d probes%s)", plan.trace, kind,
                     design.label, cand.split(), result.rate, cost, power, len(result.probes),
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


def plan_traces(cfg: Any, params: ProvisioningParams, machines: dict[str, MachineType]) -> list[TracePlan]:
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


def run_splitwise_provisioning(cfg: Any, folder: RunFolder) -> JobResult:
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
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value
