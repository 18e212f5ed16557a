"""The search DistServe's own simulator runs (LLMServe/DistServe ``simdistserve``, the README's example),
on the suite's simulator: one prefill and one decode instance per configuration, each configuration's
per-GPU rate bisected on a fixed grid.

What simdistserve does, read in its code, and how this module follows it:

- configurations (``benchmarks/search_configs.py``, ``get_distserve_configs``, low node affinity as the
  README runs it): every ``(tp_p, pp_p, tp_d, pp_d)`` with ``tp`` and ``pp`` within a node and
  ``tp_p * pp_p + tp_d * pp_d`` GPUs within a node; here :func:`enumerate_pairs`, minus the layouts the
  caller rules out (pipelines by default: see ``harness.studies.placement_search``);
- one probe (``benchmarks/simulate_dist.py``): N requests (``--N 300``) at ``per-GPU rate x GPUs`` with
  Poisson arrivals, one prefill and one decode instance; the probe passes when the 90th percentile of TTFT
  is below the TTFT target *and* the 90th percentile of TPOT is below the TPOT target, each checked alone
  (``quantile(0.9) < target``, pandas' linear interpolation); TPOT is the time from the first token to the
  last divided by the output length (``base/organize_data.py``, ``decoding_latency / output_lens``), not by
  ``output - 1``; here :func:`probe_pair` with ``tpot_rule="simdistserve"``;
- the rate (``benchmarks/search_binary.py``): bisection of the per-GPU rate from ``[0, max_per_gpu_rate]``
  (5) until ``high - low <= esp`` (0.25), the best passing midpoint kept; here :func:`bisect_pair`. The
  result is a grid value (1.5625 = 5 * 5/16 is reached by pass, fail, pass, fail from 2.5);
- the choice (``simulate.py``, ``find_best_config``): the highest per-GPU rate, ties broken by fewer GPUs,
  then by enumeration order; here :func:`search_pairs`, which also lists every configuration tied with
  the best rate (``tied``);
- decode memory: simdistserve's decode worker has no KV-cache limit (``base/worker.py``: the layout's
  ``max_num_tokens`` only bounds how many requests one iteration may take, and a hard-coded 50,000 context
  tokens per iteration, marked as a hack, bounds the iteration, the rest waiting for the next ones in turn).
  Our decode instance holds at most its KV capacity (``max_num_tokens.csv``) and queues the rest in order.
  ``decode_kv_limit="none"`` lifts the limit (a sensitivity setting); the 50,000-token round-robin cap is
  not modelled.

The pairs' bisections are independent: :func:`search_pairs` sends them, one task per pair, through a
:class:`harness.probe_pool.Pool` (in-process unless given one) and keeps the enumeration order.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np

from harness.probe_pool import InProcessPool, Pool
from harness.studies.placement_algorithm import Parallelism, PlacementSimulator, layout_check
from systems.sim.deployment_setup import PoolSetup
from systems.sim.perf.base import ArrayLike, PerfModel
from systems.sim.request import SimRequest
from vocab.records import RequestStatus

log = logging.getLogger(__name__)

TPOT_RULES = ("simdistserve", "suite")
DECODE_KV_LIMITS = ("profile", "none")
UNBOUNDED_KV_TOKENS = 10**12


class UnboundedKV(PerfModel):
    """``inner``'s timings with a KV cache that never fills (simdistserve's decode worker)."""

    def __init__(self, inner: PerfModel) -> None:
        self.inner = inner
        self.name = inner.name

    @property
    def kv_bytes_per_token(self) -> int:
        return self.inner.kv_bytes_per_token

    @property
    def kv_capacity_tokens(self) -> int:
        return UNBOUNDED_KV_TOKENS

    def prefill_time_s(self, sum_tokens: float, sum_sq_tokens: float, n_seqs: int = 1) -> float:
        return self.inner.prefill_time_s(sum_tokens, sum_sq_tokens, n_seqs)

    def decode_step_time_s(self, batch_size: ArrayLike, sum_context: ArrayLike) -> ArrayLike:
        return self.inner.decode_step_time_s(batch_size, sum_context)

    def mixed_step_time_s(self, sum_tokens: float, sum_sq_tokens: float, n_seqs: int,
                          batch_size: int, sum_context: float) -> float:
        return self.inner.mixed_step_time_s(sum_tokens, sum_sq_tokens, n_seqs, batch_size, sum_context)


@dataclass(frozen=True, order=True)
class PairConfig:
    """One prefill instance of ``prefill`` and one decode instance of ``decode``."""

    prefill: Parallelism
    decode: Parallelism

    @property
    def n_gpus(self) -> int:
        return self.prefill.n_gpus + self.decode.n_gpus

    def describe(self) -> dict[str, int]:
        return {"prefill_tp": self.prefill.tp, "prefill_pp": self.prefill.pp, "n_prefill": 1,
                "decode_tp": self.decode.tp, "decode_pp": self.decode.pp, "n_decode": 1, "n_gpus": self.n_gpus}

    def __str__(self) -> str:
        return f"P {self.prefill} + D {self.decode}"


@dataclass(frozen=True)
class PairSettings:
    """simdistserve's search settings (README: ``--max-per-gpu-rate 5 --esp 0.25``, P90 of each bound)."""

    max_per_gpu_rate: float = 5.0
    esp: float = 0.25
    quantile: float = 0.9
    tpot_rule: str = "simdistserve"  # simdistserve: (last - first token) / output; suite: / (output - 1)
    decode_kv_limit: str = "profile"  # profile: the layout's KV capacity; none: unlimited (simdistserve)

    def __post_init__(self) -> None:
        if not self.max_per_gpu_rate > 0 or not self.esp > 0:
            raise ValueError(f"max_per_gpu_rate and esp must be > 0, got {self.max_per_gpu_rate} and {self.esp}")
        if not 0 < self.quantile < 1:
            raise ValueError(f"quantile must be in (0, 1), got {self.quantile}")
        if self.tpot_rule not in TPOT_RULES:
            raise ValueError(f"tpot_rule must be one of {', '.join(TPOT_RULES)}, got {self.tpot_rule!r}")
        if self.decode_kv_limit not in DECODE_KV_LIMITS:
            raise ValueError(f"decode_kv_limit must be one of {', '.join(DECODE_KV_LIMITS)}, "
                             f"got {self.decode_kv_limit!r}")


@dataclass(frozen=True)
class PairProbe:
    """One simulation of a pair at one per-GPU rate: the two percentiles and whether both were met."""

    per_gpu_rate: float
    ttft_quantile_s: float
    tpot_quantile_s: float
    passed: bool


@dataclass(frozen=True)
class PairResult:
    """A pair's bisected per-GPU rate (0 when no probe passed) and its probes."""

    config: PairConfig
    per_gpu_rate: float
    probes: tuple[PairProbe, ...]

    @property
    def rate_rps(self) -> float:
        return self.per_gpu_rate * self.config.n_gpus


@dataclass
class PairSearchResult:
    """Every pair searched, the chosen one, the ones tied with it, and the layouts skipped."""

    results: list[PairResult]
    skipped: list[tuple[PairConfig, str]]
    best: Optional[PairResult]
    tied: list[PairResult]  # every pair whose per-GPU rate equals the best's (the best included)
    settings: PairSettings
    n_sims: int = 0
    wall_s: float = 0.0


def enumerate_pairs(gpus_per_node: int, unsupported: Optional[Callable[[Parallelism], Optional[str]]] = None,
                    ) -> tuple[list[PairConfig], list[tuple[PairConfig, str]]]:
    """simdistserve's low-affinity configurations on one node: ``tp``, ``pp`` within the node, the pair within
    the node; pairs with a layout ``unsupported`` rules out are returned with its reason. Order: (tp_p, pp_p,
    tp_d, pp_d), as simdistserve's ``itertools.product``."""
    if gpus_per_node < 2:
        raise ValueError(f"a prefill and a decode instance need at least 2 GPUs, got gpus_per_node={gpus_per_node}")
    layouts = [Parallelism(tp, pp) for tp in range(1, gpus_per_node + 1) for pp in range(1, gpus_per_node + 1)
               if tp * pp < gpus_per_node]
    usable: list[PairConfig] = []
    skipped: list[tuple[PairConfig, str]] = []
    for p in layouts:
        for d in layouts:
            pair = PairConfig(p, d)
            if pair.n_gpus > gpus_per_node:
                continue
            reasons = [r for r in ((unsupported(p), unsupported(d)) if unsupported else ()) if r]
            if reasons:
                skipped.append((pair, "; ".join(dict.fromkeys(reasons))))
            else:
                usable.append(pair)
    return usable, skipped


def _ttft_tpot(requests: Sequence[SimRequest], tpot_rule: str) -> tuple[np.ndarray, np.ndarray]:
    """Per request TTFT and TPOT in seconds; a request that did not finish has both infinite."""
    ttft = np.full(len(requests), math.inf)
    tpot = np.full(len(requests), math.inf)
    for i, r in enumerate(requests):
        if r.status != RequestStatus.OK:
            continue
        ttft[i] = r.first_token_s - r.spec.arrival_s
        decode_s = r.finish_s - r.first_token_s
        if tpot_rule == "simdistserve":
            tpot[i] = decode_s / r.out_len
        else:
            tpot[i] = decode_s / (r.out_len - 1) if r.out_len > 1 else 0.0
    return ttft, tpot


def quantile(values: np.ndarray, q: float) -> float:
    """The ``q`` quantile with linear interpolation (pandas' and NumPy's default), infinite where it
    interpolates towards an infinite value (a request that never finished)."""
    ordered = np.sort(np.asarray(values, dtype=float))
    pos = q * (len(ordered) - 1)
    lo, hi = int(math.floor(pos)), int(math.ceil(pos))
    if lo == hi:
        return float(ordered[lo])
    if math.isinf(ordered[hi]):
        return math.inf
    return float(ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo))


def probe_pair(sim: PlacementSimulator, pair: PairConfig, per_gpu_rate: float, settings: PairSettings) -> PairProbe:
    """Simulate ``pair`` at ``per_gpu_rate`` x its GPUs; passed when each bound's quantile is below its bound."""
    decode = sim.pool("decode", pair.decode)
    if settings.decode_kv_limit == "none":
        decode = PoolSetup("decode", 1, decode.shape, UnboundedKV(decode.perf), decode.hardware)
    pools = (sim.pool("prefill", pair.prefill), decode)
    ttft, tpot = _ttft_tpot(sim.run(pools, per_gpu_rate * pair.n_gpus), settings.tpot_rule)
    q_ttft = quantile(ttft, settings.quantile)
    q_tpot = quantile(tpot, settings.quantile)
    return PairProbe(per_gpu_rate, q_ttft, q_tpot, bool(q_ttft < sim.ttft_s and q_tpot < sim.tpot_s))


def bisect_pair(sim: PlacementSimulator, pair: PairConfig, settings: PairSettings) -> PairResult:
    """simdistserve's ``run_binary_search``: bisect ``[0, max_per_gpu_rate]`` until ``high - low <= esp``."""
    low, high, best = 0.0, float(settings.max_per_gpu_rate), 0.0
    probes = []
    while high - low > settings.esp:
        mid = (low + high) / 2
        probe = probe_pair(sim, pair, mid, settings)
        probes.append(probe)
        if probe.passed:
            low = best = mid
        else:
            high = mid
    log.info("%s: %.4g req/s per GPU after %d probes", pair, best, len(probes))
    return PairResult(pair, best, tuple(probes))


def pair_task(sim: PlacementSimulator, settings: PairSettings, pair: PairConfig) -> tuple[PairResult, int]:
    """One probe-pool task: :func:`bisect_pair` of ``pair`` and the simulations it ran (a worker's
    simulator is a copy, so the caller counts them)."""
    before = sim.n_sims
    result = bisect_pair(sim, pair, settings)
    return result, sim.n_sims - before


def search_pairs(sim: PlacementSimulator, gpus_per_node: int, settings: PairSettings = PairSettings(),
                 unsupported: Optional[Callable[[Parallelism], Optional[str]]] = None,
                 pool: Optional[Pool] = None) -> PairSearchResult:
    """Every pair of :func:`enumerate_pairs` bisected (through ``pool``; default: in this process); the best
    by simdistserve's rule and the tied ones. Layouts whose performance model cannot be built are skipped
    with the model's reason."""
    start = time.perf_counter()
    sims_before = sim.n_sims

    why_not = layout_check(sim, unsupported)
    pairs, skipped = enumerate_pairs(gpus_per_node, why_not)
    pool = pool if pool is not None else InProcessPool()
    done = pool.map(functools.partial(pair_task, sim, settings), pairs, desc="placement: pairs")
    results = [result for result, _ in done]
    sim.n_sims = sims_before + sum(n for _, n in done)  # in-process: unchanged; workers: their simulations
    passing = [r for r in results if r.per_gpu_rate > 0]
    best = min(passing, key=lambda r: (-r.per_gpu_rate, r.config.n_gpus, results.index(r))) if passing else None
    tied = [r for r in passing if best is not None and r.per_gpu_rate == best.per_gpu_rate]
    return PairSearchResult(results, skipped, best, tied, settings, sim.n_sims - sims_before,
                            time.perf_counter() - start)
