"""DistServe's placement search for high node affinity (OSDI'24, arXiv 2401.09670, §4.1 Algorithm 1),
run on the suite's simulator.

1. Enumerate one instance's parallel layouts, ``(tp, pp)`` with ``tp`` within a node and ``tp * pp``
   within the GPU budget, keeping those the caller and the performance model support.
2. For every layout and phase, simulate that phase alone on one instance (a one-phase
   :class:`~systems.sim.simulation.Simulation`: prefill-only requests end at their first token, decode-only
   requests arrive with their KV) at Poisson rates, and find by geometric bracketing plus bisection
   (:func:`harness.capacity.search_max_rate`) the highest rate whose attainment of the phase's SLO (TTFT
   for prefill, TPOT for decode) reaches the target. Goodput per GPU = that rate / the instance's GPUs. The rate is capped at an analytic
   throughput bound (:meth:`PlacementSimulator.throughput_bound`): a few hundred requests cannot
   saturate a decode instance whose KV cache holds most of them at once, so without the cap such a
   simulation "passes" at any rate.
3. Algorithm 1 keeps the best layout per phase (highest goodput per GPU; ties: fewer GPUs) and
   replicates it to a target rate ``R``: ``ceil(R / rate_p)`` prefill and ``ceil(R / rate_d)`` decode
   instances. Within a fixed GPU budget (one node) the two best layouts may not fit together, so the
   chosen deployment is the best balanced pair over all layouts (:func:`best_plan`): replica counts
   ``n_p, n_d`` within the budget, judged by ``min(n_p * rate_p, n_d * rate_d)`` per GPU (or in total).
4. Optionally check the chosen deployment end to end: full P/D simulations judged on both bounds.

Nothing here knows about Hydra: :class:`PlacementSimulator` takes a request list, a performance-model
factory and a :class:`~systems.sim.deployment_setup.DeploymentSetup` factory; ``harness.studies.placement_search``
builds them from a run configuration.

The searches of step 2 are independent: :func:`search_placement` sends them, one task per phase and
layout, through a :class:`harness.probe_pool.Pool` (in-process unless given one; a worker gets a copy of
the simulator, so the simulator and its factories must pickle) and takes the results back in the
enumeration order, so the outcome does not depend on where they ran.

Poisson arrivals at rate ``r`` are the arrivals at rate 1 divided by ``r`` (NumPy's exponential draw
is ``scale * standard_exponential`` from the same stream), so one request list serves every rate.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from harness.capacity import RateSearch, search_max_rate
from harness.probe_pool import InProcessPool, Pool
from systems.config import HardwareConfig
from systems.sim.deployment_setup import DeploymentSetup, PoolSetup
from systems.sim.perf.base import InstanceShape, PerfModel
from systems.sim.request import SimRequest
from systems.sim.simulation import Simulation
from vocab.records import RequestSpec, RequestStatus

log = logging.getLogger(__name__)

PHASES = ("prefill", "decode")
OBJECTIVES = ("rate", "per_gpu")


# -- layouts ---------------------------------------------------------------------------------------
@dataclass(frozen=True, order=True)
class Parallelism:
    """One instance's layout: tensor (intra-op) and pipeline (inter-op) parallel degrees."""

    tp: int
    pp: int = 1

    @property
    def n_gpus(self) -> int:
        return self.tp * self.pp

    def __str__(self) -> str:
        return f"tp{self.tp}pp{self.pp}"


def enumerate_parallelism(gpus_per_node: int, nodes: int = 1,
                          unsupported: Optional[Callable[[Parallelism], Optional[str]]] = None,
                          ) -> tuple[list[Parallelism], list[tuple[Parallelism, str]]]:
    """Algorithm 1's layouts: ``tp`` in ``1..gpus_per_node`` (intra-op stays in a node), ``pp`` such that
    ``tp * pp <= gpus_per_node * nodes``. ``unsupported(layout)`` returns why a layout cannot run (or None).

    Returns (usable layouts, [(skipped layout, reason)]), both ordered by (tp, pp).
    """
    if gpus_per_node < 1 or nodes < 1:
        raise ValueError(f"gpus_per_node and nodes must be >= 1, got {gpus_per_node} and {nodes}")
    budget = gpus_per_node * nodes
    usable: list[Parallelism] = []
    skipped: list[tuple[Parallelism, str]] = []
    for tp in range(1, gpus_per_node + 1):
        for pp in range(1, budget // tp + 1):
            par = Parallelism(tp, pp)
            reason = unsupported(par) if unsupported is not None else None
            if reason:
                skipped.append((par, reason))
            else:
                usable.append(par)
    return usable, skipped


# -- attainment of simulated requests --------------------------------------------------------------
def attainment(requests: Sequence[SimRequest], ttft_s: Optional[float] = None,
               tpot_s: Optional[float] = None) -> float:
    """Fraction of ``requests`` that finished ``ok`` within the given bounds (``None``: not checked).

    The same rule as ``harness.metrics.slo_mask`` on the records, computed on the simulator's requests
    (no record building): TTFT from the scheduled arrival; TPOT = (finish - first token) / (n_out - 1),
    met vacuously by single-token requests.
    """
    if not requests:
        return math.nan
    ok = RequestStatus.OK
    met = 0
    for r in requests:
        if r.status != ok:
            continue
        if ttft_s is not None and not r.first_token_s - r.spec.arrival_s <= ttft_s:
            continue
        if tpot_s is not None and r.out_len > 1 and not (r.finish_s - r.first_token_s) / (r.out_len - 1) <= tpot_s:
            continue
        met += 1
    return met / len(requests)


# -- results ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PhaseResult:
    """The highest rate one instance of ``parallelism`` sustains for one phase (``phase``)."""

    phase: str
    parallelism: Parallelism
    search: RateSearch[float]  # payload: the attainment at each evaluated rate
    note: str = ""  # why the search was cut short (e.g. the phase misses its SLO even unloaded)
    bound_rps: float = math.inf  # the throughput bound the search was capped at (inf: none)

    @property
    def attainment(self) -> float:
        """Attainment at ``max_rate_rps`` (NaN when no rate passed)."""
        return self.search.best if self.search.best is not None else math.nan

    @property
    def max_rate_rps(self) -> float:
        return self.search.rate_rps

    @property
    def per_gpu_rate(self) -> float:
        return self.search.rate_rps / self.parallelism.n_gpus

    @property
    def n_sims(self) -> int:
        return self.search.n_evals


def best_result(results: Iterable[PhaseResult]) -> Optional[PhaseResult]:
    """Highest goodput per GPU with a rate > 0; ties: fewer GPUs, then smaller (tp, pp)."""
    usable = [r for r in results if r.max_rate_rps > 0]
    if not usable:
        return None
    return min(usable, key=lambda r: (-r.per_gpu_rate, r.parallelism.n_gpus, r.parallelism))


@dataclass(frozen=True)
class ReplicaPlan:
    """``n_prefill`` prefill instances of one layout and ``n_decode`` decode instances of another."""

    prefill: Parallelism
    decode: Parallelism
    n_prefill: int
    n_decode: int
    prefill_rate_rps: float  # per prefill instance
    decode_rate_rps: float  # per decode instance

    @property
    def n_gpus(self) -> int:
        return self.n_prefill * self.prefill.n_gpus + self.n_decode * self.decode.n_gpus

    @property
    def rate_rps(self) -> float:
        """What the deployment serves by the per-phase searches: its slower side."""
        return min(self.n_prefill * self.prefill_rate_rps, self.n_decode * self.decode_rate_rps)

    @property
    def per_gpu_rate(self) -> float:
        return self.rate_rps / self.n_gpus

    def describe(self) -> dict[str, object]:
        return {"prefill_tp": self.prefill.tp, "prefill_pp": self.prefill.pp, "n_prefill": self.n_prefill,
                "decode_tp": self.decode.tp, "decode_pp": self.decode.pp, "n_decode": self.n_decode,
                "n_gpus": self.n_gpus, "rate_rps": self.rate_rps, "per_gpu_rate": self.per_gpu_rate}


def _plan_key(plan: ReplicaPlan, objective: str) -> tuple[float, ...]:
    """Order of plans: the objective, then the other measure, then spare capacity, then fewer GPUs."""
    spare = plan.n_prefill * plan.prefill_rate_rps + plan.n_decode * plan.decode_rate_rps
    if objective == "rate":
        return (plan.rate_rps, plan.per_gpu_rate, spare, -plan.n_gpus)
    return (plan.per_gpu_rate, plan.rate_rps, spare, -plan.n_gpus)


def balance_replicas(prefill: PhaseResult, decode: PhaseResult, gpu_budget: int,
                     objective: str = "per_gpu") -> Optional[ReplicaPlan]:
    """The P:D replica counts within ``gpu_budget`` GPUs (at least one of each) that maximise the rate
    per GPU (``objective="per_gpu"``; ties: higher rate) or the served rate ``min(n_p * rate_p,
    n_d * rate_d)`` (``"rate"``; ties: higher rate per GPU); then more spare capacity, then fewer GPUs.
    None when one of each does not fit or a phase has rate 0."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    gp, gd = prefill.parallelism.n_gpus, decode.parallelism.n_gpus
    if prefill.max_rate_rps <= 0 or decode.max_rate_rps <= 0 or gp + gd > gpu_budget:
        return None
    best: Optional[ReplicaPlan] = None
    best_key: tuple[float, ...] = ()
    for n_p in range(1, (gpu_budget - gd) // gp + 1):
        for n_d in range(1, (gpu_budget - n_p * gp) // gd + 1):
            plan = ReplicaPlan(prefill.parallelism, decode.parallelism, n_p, n_d,
                               prefill.max_rate_rps, decode.max_rate_rps)
            key = _plan_key(plan, objective)
            if best is None or key > best_key:
                best, best_key = plan, key
    return best


def ideal_per_gpu_rate(prefill: PhaseResult, decode: PhaseResult) -> float:
    """Goodput per GPU of a deployment with the P:D ratio exactly balanced (fractional replicas):
    ``1 / (gpus_p / rate_p + gpus_d / rate_d)``, what Algorithm 1 approaches at large scale."""
    if prefill.max_rate_rps <= 0 or decode.max_rate_rps <= 0:
        return 0.0
    return 1.0 / (prefill.parallelism.n_gpus / prefill.max_rate_rps + decode.parallelism.n_gpus / decode.max_rate_rps)


@dataclass(frozen=True)
class Replication:
    """Algorithm 1's replication to a target rate: ``ceil(R / rate_p)`` and ``ceil(R / rate_d)`` instances."""

    target_rate_rps: float
    n_prefill: int
    n_decode: int
    n_gpus: int
    n_nodes: int
    capacity_rps: float  # min(n_prefill * rate_p, n_decode * rate_d)


def replicate_to_rate(prefill: PhaseResult, decode: PhaseResult, target_rate_rps: float,
                      gpus_per_node: int) -> Replication:
    """How many instances of each best layout serve ``target_rate_rps`` (nodes: GPUs / ``gpus_per_node``, up)."""
    if target_rate_rps <= 0:
        raise ValueError(f"target_rate_rps must be > 0, got {target_rate_rps}")
    if prefill.max_rate_rps <= 0 or decode.max_rate_rps <= 0:
        raise ValueError("cannot replicate a phase whose best rate is 0")
    n_p = math.ceil(target_rate_rps / prefill.max_rate_rps - 1e-9)
    n_d = math.ceil(target_rate_rps / decode.max_rate_rps - 1e-9)
    gpus = n_p * prefill.parallelism.n_gpus + n_d * decode.parallelism.n_gpus
    capacity = min(n_p * prefill.max_rate_rps, n_d * decode.max_rate_rps)
    return Replication(float(target_rate_rps), n_p, n_d, gpus, math.ceil(gpus / gpus_per_node), capacity)


@dataclass(frozen=True)
class Verification:
    """The chosen plan simulated end to end (full P/D), judged on TTFT and TPOT together."""

    plan_rate_rps: float
    attainment_at_plan_rate: float
    search: Optional[RateSearch[float]]  # the end-to-end max-rate search; None when only the plan rate was run

    @property
    def max_rate_rps(self) -> float:
        return self.search.rate_rps if self.search is not None else math.nan


# -- simulations -----------------------------------------------------------------------------------
class PlacementSimulator:
    """Simulates one phase on one instance, or a whole P/D deployment, at any Poisson rate.

    ``unit_specs`` are the requests with Poisson arrivals at 1 request/s; ``perf_for`` builds the
    performance model of an instance shape (``ValueError`` when unsupported; models are cached per
    shape and shared by both phases); ``make_setup(pools)`` returns a fresh ``DeploymentSetup`` with those
    pools (engine settings, link and a new scheduler). ``ttft_s``/``tpot_s`` are the phase bounds.
    """

    def __init__(self, unit_specs: Sequence[RequestSpec], hardware: HardwareConfig,
                 perf_for: Callable[[InstanceShape], PerfModel],
                 make_setup: Callable[[tuple[PoolSetup, ...]], DeploymentSetup],
                 ttft_s: float, tpot_s: float) -> None:
        if not unit_specs:
            raise ValueError("the placement search needs at least one request")
        self.unit_specs = tuple(unit_specs)
        self._unit_arrivals = [s.arrival_s for s in self.unit_specs]
        self.hardware = hardware
        self._perf_for = perf_for
        self._perf: dict[InstanceShape, PerfModel] = {}
        self.make_setup = make_setup
        self.ttft_s = ttft_s
        self.tpot_s = tpot_s
        self.n_sims = 0
        prompts = np.array([s.input_length for s in self.unit_specs], dtype=float)
        outs = np.array([max(s.output_length, 1) for s in self.unit_specs], dtype=float)
        self._prompts, self._outs = prompts, outs

    def shape(self, par: Parallelism) -> InstanceShape:
        return InstanceShape(self.hardware.name, par.tp, par.pp)

    def perf(self, par: Parallelism) -> PerfModel:
        """The (cached) performance model of ``par``; ``ValueError`` when it cannot be built."""
        shape = self.shape(par)
        model = self._perf.get(shape)
        if model is None:
            model = self._perf[shape] = self._perf_for(shape)
        return model

    def specs_at(self, rate_rps: float) -> list[RequestSpec]:
        """The requests with Poisson arrivals at ``rate_rps``."""
        scale = 1.0 / rate_rps
        return [dataclasses.replace(s, arrival_s=t * scale) for s, t in zip(self.unit_specs, self._unit_arrivals,
                                                                                strict=True)]

    def run(self, pools: tuple[PoolSetup, ...], rate_rps: float) -> list[SimRequest]:
        """One simulation of ``pools`` at ``rate_rps``; the simulator's requests."""
        self.n_sims += 1
        return Simulation(self.make_setup(pools)).run(self.specs_at(rate_rps)).requests

    def pool(self, role: str, par: Parallelism, count: int = 1) -> PoolSetup:
        return PoolSetup(role, count, self.shape(par), self.perf(par), self.hardware)

    def phase_attainment(self, phase: str, par: Parallelism, rate_rps: float) -> float:
        """Attainment of the phase's own bound by one ``phase`` instance of ``par`` at ``rate_rps``."""
        requests = self.run((self.pool(phase, par),), rate_rps)
        if phase == "prefill":
            return attainment(requests, ttft_s=self.ttft_s)
        return attainment(requests, tpot_s=self.tpot_s)

    def plan_attainment(self, plan: ReplicaPlan, rate_rps: float) -> float:
        """Attainment of both bounds by the whole P/D deployment ``plan`` at ``rate_rps``."""
        pools = (self.pool("prefill", plan.prefill, plan.n_prefill), self.pool("decode", plan.decode, plan.n_decode))
        return attainment(self.run(pools, rate_rps), ttft_s=self.ttft_s, tpot_s=self.tpot_s)

    # -- analytic start points and an unloaded feasibility check (no simulation) ------------------
    def unloaded_attainment(self, phase: str, par: Parallelism) -> float:
        """Attainment if every request ran alone: prefill of its prompt, or decode at batch size 1."""
        perf = self.perf(par)
        if phase == "prefill":
            t = np.array([perf.prefill_time_s(p, p * p, 1) for p in self._prompts])
            return float(np.mean(t <= self.ttft_s))
        # mean step over the decode of one request: the context grows from prompt+1 to prompt+out-1
        mid = self._prompts + self._outs / 2.0
        t = np.asarray(perf.decode_step_time_s(np.ones_like(mid), mid), dtype=float)
        return float(np.mean((t <= self.tpot_s) | (self._outs <= 1)))

    def rate_hint(self, phase: str, par: Parallelism, max_seqs: int = 256) -> float:
        """A rough estimate of the phase's sustainable rate, to start the bracketing near the answer.

        Prefill: 1 / mean unloaded prefill time. Decode: by Little's law, the largest batch ``B`` whose
        step fits the TPOT bound and whose KV fits the cache, serving ``B / (mean output * step)`` req/s.
        """
        perf = self.perf(par)
        if phase == "prefill":
            mean_t = float(np.mean([perf.prefill_time_s(p, p * p, 1) for p in self._prompts]))
            return 1.0 / mean_t if mean_t > 0 else 1.0
        return self._decode_rate(perf, max_seqs, self.tpot_s)

    def throughput_bound(self, phase: str, par: Parallelism, max_seqs: int = 256,
                         max_batched_tokens: int = 8192) -> float:
        """An upper bound on the rate one instance can sustain at all (utilisation 1), from mean lengths.

        Prefill: ``k`` average prompts per iteration (``k = max_batched_tokens // mean prompt``, at least
        1) every ``prefill_time(k prompts)``. Decode: the largest batch whose KV (mean context: prompt +
        half the output) fits the cache and ``max_seqs``, by Little's law ``B / (mean output * step(B))``.
        A finite simulation can pass above this rate (its requests all fit in the KV cache at once, so
        TPOT never sees the queue grow); the search never reports a rate above it.
        """
        perf = self.perf(par)
        if phase == "prefill":
            mean_l = float(np.mean(self._prompts))
            k = max(1, int(max_batched_tokens // max(mean_l, 1.0)))
            t = perf.prefill_time_s(k * mean_l, k * float(np.mean(self._prompts ** 2)), k)
            return k / t if t > 0 else math.inf
        return self._decode_rate(perf, max_seqs, None)

    def _decode_rate(self, perf: PerfModel, max_seqs: int, tpot_s: Optional[float]) -> float:
        ctx = float(np.mean(self._prompts + self._outs / 2.0))
        out = float(np.mean(self._outs))
        batch = np.arange(1, max_seqs + 1, dtype=float)
        step = np.asarray(perf.decode_step_time_s(batch, batch * ctx), dtype=float)
        fits = batch * ctx <= perf.kv_capacity_tokens
        if tpot_s is not None:
            fits &= step <= tpot_s
        if not fits.any():
            return 0.1 if tpot_s is not None else 1.0 / (out * float(step[0]))
        rates = batch[fits] / (out * step[fits])
        return float(rates.max())


# -- the search ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SearchSettings:
    """How hard each rate search works (see :func:`harness.capacity.search_max_rate`) and what bounds it."""

    target: float = 0.9  # SLO attainment a phase must reach
    growth: float = 2.0
    rel_tol: float = 0.01
    max_steps: int = 8
    hint_scale: float = 0.8  # start the bracketing at hint_scale * the analytic rate hint
    min_rate_rps: float = 1e-3
    max_rate_rps: float = 1e4
    max_seqs: int = 256  # the engine's running-sequence limit (decode batch)
    max_batched_tokens: int = 8192  # the engine's prefill token budget per iteration
    throughput_bound: bool = True  # cap each phase's rate at PlacementSimulator.throughput_bound


@dataclass
class PlacementResult:
    """Everything the search found; see :func:`search_placement`."""

    candidates: list[PhaseResult]
    skipped: list[tuple[str, Parallelism, str]]  # (phase, layout, reason)
    best_prefill: Optional[PhaseResult]  # Algorithm 1: highest goodput per GPU per phase
    best_decode: Optional[PhaseResult]
    alg1_plan: Optional[ReplicaPlan]  # the two best layouts balanced within the GPU budget (None: do not fit)
    plan: Optional[ReplicaPlan]  # the chosen deployment: the best balanced pair of layouts within the budget
    ideal_per_gpu_rate: float
    replication: Optional[Replication]
    verification: Optional[Verification]
    gpu_budget: int
    objective: str = "per_gpu"
    n_sims: int = 0
    wall_s: float = 0.0
    phase_wall_s: dict[str, float] = field(default_factory=dict)


def attainment_search(attainment_at: Callable[[float], float], start_rps: float, settings: SearchSettings,
                      min_rate_rps: float, max_rate_rps: float) -> RateSearch[float]:
    """The highest rate whose ``attainment_at(rate)`` reaches ``settings.target``: geometric bracketing and
    bisection until the bracket is within ``settings.rel_tol`` (the payload of each probe is its attainment)."""

    def evaluate(rate: float) -> tuple[bool, float]:
        value = float(attainment_at(rate))
        return value >= settings.target, value

    return search_max_rate(evaluate, start_rps, growth=settings.growth, steps=settings.max_steps,
                           midpoint="geometric", rel_tol=settings.rel_tol, min_rate_rps=min_rate_rps,
                           max_rate_rps=max_rate_rps)


def search_phase(sim: PlacementSimulator, phase: str, par: Parallelism, settings: SearchSettings) -> PhaseResult:
    """The highest rate one ``phase`` instance of ``par`` sustains at ``settings.target`` attainment."""
    unloaded = sim.unloaded_attainment(phase, par)
    if unloaded < settings.target:
        note = f"misses the target even unloaded (attainment {unloaded:.3f} < {settings.target:g})"
        log.info("%s %s: %s", phase, par, note)
        return PhaseResult(phase, par, RateSearch(rate_rps=0.0, upper_rps=0.0), note)
    bound = math.inf
    ceiling = settings.max_rate_rps
    if settings.throughput_bound:
        bound = sim.throughput_bound(phase, par, settings.max_seqs, settings.max_batched_tokens)
        ceiling = min(ceiling, bound)
    start = settings.hint_scale * min(sim.rate_hint(phase, par, settings.max_seqs), ceiling)
    search = attainment_search(lambda r: sim.phase_attainment(phase, par, r), start, settings,
                               min_rate_rps=min(settings.min_rate_rps, ceiling / 2), max_rate_rps=ceiling)
    note = ""
    if math.isinf(search.upper_rps):
        note = ("capped at the throughput bound" if ceiling < settings.max_rate_rps else "reached max_rate_rps") + \
            f" ({ceiling:.4g} req/s)"
    log.info("%s %s: %.3f req/s (%.3f per GPU, attainment %.3f) after %d simulations%s", phase, par,
             search.rate_rps, search.rate_rps / par.n_gpus,
             search.best if search.best is not None else math.nan, search.n_evals,
             f"; {note}" if note else "")
    return PhaseResult(phase, par, search, note, bound)


def phase_task(sim: PlacementSimulator, settings: SearchSettings, task: tuple[str, Parallelism]
               ) -> tuple[PhaseResult, int, float]:
    """One probe-pool task: :func:`search_phase` of ``task = (phase, layout)``, with the simulations it
    ran and its wall time (a worker's simulator is a copy, so the caller counts them)."""
    phase, par = task
    before, start = sim.n_sims, time.perf_counter()
    result = search_phase(sim, phase, par, settings)
    return result, sim.n_sims - before, time.perf_counter() - start


def best_plan(prefills: Sequence[PhaseResult], decodes: Sequence[PhaseResult], gpu_budget: int,
              objective: str = "per_gpu") -> Optional[ReplicaPlan]:
    """The best balanced plan over every pair of layouts (see :func:`balance_replicas`)."""
    plans = [balance_replicas(p, d, gpu_budget, objective) for p in prefills for d in decodes]
    usable = [q for q in plans if q is not None]
    return max(usable, key=lambda q: _plan_key(q, objective)) if usable else None


def layout_check(sim: PlacementSimulator, unsupported: Optional[Callable[[Parallelism], Optional[str]]] = None
                 ) -> Callable[[Parallelism], Optional[str]]:
    """Why a layout cannot be searched (``unsupported``'s reason, else the performance model's), None if it can."""

    def why_not(par: Parallelism) -> Optional[str]:
        reason = unsupported(par) if unsupported is not None else None
        if reason:
            return reason
        try:
            sim.perf(par)
        except ValueError as exc:
            return str(exc)
        return None

    return why_not


def search_placement(sim: PlacementSimulator, gpus_per_node: int, nodes: int = 1,
                     settings: SearchSettings = SearchSettings(),
                     unsupported: Optional[Callable[[Parallelism], Optional[str]]] = None,
                     target_rate_rps: Optional[float] = None, verify: str = "bisect",
                     objective: str = "per_gpu", pool: Optional[Pool] = None) -> PlacementResult:
    """DistServe's Algorithm 1 on ``sim`` (see the module docstring).

    ``unsupported(layout)`` may add reasons to skip layouts; layouts whose performance model cannot be
    built are skipped with the model's reason. The chosen deployment (``plan``) is the best pair of
    layouts, balanced within ``gpus_per_node * nodes`` GPUs, by ``objective`` (``per_gpu``: goodput per
    GPU, DistServe's measure; ``rate``: the rate served); Algorithm 1's own pair (the best layout of
    each phase) is ``alg1_plan`` and is the chosen one whenever it fits and is best. ``verify``:
    ``"bisect"`` (end-to-end max rate of the plan), ``"point"`` (attainment at its rate only) or ``"none"``.
    The per-layout searches run through ``pool`` (default: in this process), the end-to-end check here;
    ``phase_wall_s`` sums each phase's search times (in parallel they overlap).
    """
    if verify not in ("bisect", "point", "none"):
        raise ValueError(f"verify must be bisect, point or none, got {verify!r}")
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    start = time.perf_counter()
    sims_before = sim.n_sims

    why_not = layout_check(sim, unsupported)
    layouts, skipped_layouts = enumerate_parallelism(gpus_per_node, nodes, why_not)
    skipped = [(phase, par, reason) for phase in PHASES for par, reason in skipped_layouts]
    for par, reason in skipped_layouts:
        log.info("skipping %s: %s", par, reason)
    tasks = [(phase, par) for phase in PHASES for par in layouts]
    pool = pool if pool is not None else InProcessPool()
    done = pool.map(functools.partial(phase_task, sim, settings), tasks, desc="placement: phases x layouts")
    candidates = [result for result, _, _ in done]
    sim.n_sims = sims_before + sum(n for _, n, _ in done)  # in-process: unchanged; workers: their simulations
    phase_wall = {phase: sum(wall for (p, _), (_, _, wall) in zip(tasks, done, strict=True) if p == phase)
                  for phase in PHASES}
    prefills = [c for c in candidates if c.phase == "prefill"]
    decodes = [c for c in candidates if c.phase == "decode"]
    best_p, best_d = best_result(prefills), best_result(decodes)
    budget = gpus_per_node * nodes
    alg1 = plan = replication = verification = None
    ideal = 0.0
    if best_p is not None and best_d is not None:
        alg1 = balance_replicas(best_p, best_d, budget, objective)
        ideal = ideal_per_gpu_rate(best_p, best_d)
        if target_rate_rps:
            replication = replicate_to_rate(best_p, best_d, target_rate_rps, gpus_per_node)
        plan = best_plan(prefills, decodes, budget, objective)
        if alg1 is None:
            log.info("the best layouts (prefill %s, decode %s) do not fit %d GPUs together", best_p.parallelism,
                     best_d.parallelism, budget)
    if plan is None:
        log.warning("no placement fits: best prefill %s, best decode %s, GPU budget %d",
                    best_p.parallelism if best_p else None, best_d.parallelism if best_d else None, budget)
    elif verify != "none":
        t0 = time.perf_counter()
        verification = verify_plan(sim, plan, settings, bisect=verify == "bisect")
        phase_wall["verify"] = time.perf_counter() - t0
    return PlacementResult(candidates, skipped, best_p, best_d, alg1, plan, ideal, replication, verification,
                           budget, objective, sim.n_sims - sims_before, time.perf_counter() - start, phase_wall)


def verify_plan(sim: PlacementSimulator, plan: ReplicaPlan, settings: SearchSettings, bisect: bool = True) -> Verification:
    """Simulate ``plan`` end to end at its rate and, with ``bisect``, search its end-to-end max rate."""
    rate = plan.rate_rps
    if not bisect:
        return Verification(rate, sim.plan_attainment(plan, rate), None)
    search = attainment_search(lambda r: sim.plan_attainment(plan, r), rate, settings,
                               min_rate_rps=settings.min_rate_rps, max_rate_rps=settings.max_rate_rps)
    at_plan = dict(search.evaluations).get(rate)
    if at_plan is None:  # the start was clamped to the search's rate range
        at_plan = sim.plan_attainment(plan, rate)
    log.info("plan %s end to end: attainment %.3f at %.3f req/s; max %.3f req/s (%.3f per GPU)", plan.describe(),
             at_plan, rate, search.rate_rps, search.rate_rps / plan.n_gpus)
    return Verification(rate, at_plan, search)
