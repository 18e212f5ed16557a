"""Scheduling for disaggregated deployments: which prefill instance computes a request, how much cached
KV it reuses, and whether the request is admitted at all.

Like the colocated routing policies, these are plain synchronous objects over a read-only cluster view
(:class:`PDClusterView`), so the simulator and a real router run the same code. The view answers in
estimates (seconds, tokens); a policy never reads a clock.

Policies (``PD_POLICY_NAMES``):

* ``random``, ``round_robin``: ignore load and caches;
* ``load_balancing``: the prefill instance with the shortest estimated queue;
* ``local_cache_aware``: the smallest estimated TTFT = queue + prefill given the prefix the instance holds
  itself (its HBM and its node's DRAM), never fetching from elsewhere;
* ``prefix_match``: the instance whose own cache (HBM and its node's DRAM) holds the longest prefix of the
  request, ties to the shortest estimated queue, then the lowest index; never fetching from elsewhere
  (FAST'25 §5.3.2's local setup: requests go to the node with the higher prefix-match ratio);
* ``conductor``: Mooncake's Conductor (FAST'25, Algorithm 1), global cache-aware: for each prefill
  instance the estimated TTFT uses the longest prefix anywhere in the cluster pool when that prefix is
  more than ``kvcache_balancing_threshold`` times the instance's own match (paying the transfer), else
  the local match; the smallest estimate wins. A prefix is only reused when loading it beats
  recomputing it (Mooncake's Eq. 2 break-even), which the view's cost estimates decide.

The decode instance is chosen by load: the smallest estimated step time (TBT) among decode instances
with room for the request's KV. Admission (``rejection``) follows Mooncake (arXiv 2407.00079 v3, §7 and
Table 3). The prefill pool is overloaded when the request's estimated TTFT exceeds the TTFT SLO; the decode
pool is overloaded (:func:`decode_overloaded`) when no decode instance has room for the request's KV or the
pool's load, the *average TBT ratio over all decode instances* (estimated TBT / TBT SLO,
:func:`decode_load`), exceeds the decode load threshold (``decode_load_threshold``, default 1: the TBT SLO
itself; the paper states no value, so a reproduction may set it lower to reject before the SLO is reached):

* ``none``: admit everything;
* ``baseline``: per-stage checks, each when its stage starts: the prefill stage's at arrival, the decode
  stage's by the driver when the prefill ends, so a request rejected there has wasted its prefill;
* ``early``: both pools checked at arrival, from their current loads;
* ``predictive``: as ``early``, but the decode load is the one predicted, system-level, for the moment the
  request's prefill would end: the requests the prefill instances will have finished by then join, and
  those whose decode, every one assumed to take the same time ``t_d``, ends before then leave. No
  per-request output length is used (the paper leaves that prediction to future work). The view computes
  the predicted step times (``DecodeView.predicted_step_s``).

"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional, Protocol

import numpy as np

__all__ = [
    "PD_POLICY_NAMES",
    "REJECTION_MODES",
    "DecodeView",
    "PDClusterView",
    "PDDecision",
    "PDScheduler",
    "PrefillView",
    "PrefixSource",
    "check_decode_load_threshold",
    "decode_load",
    "decode_overloaded",
]

PD_POLICY_NAMES = ("random", "round_robin", "load_balancing", "local_cache_aware", "prefix_match", "conductor")
REJECTION_MODES = ("none", "baseline", "early", "predictive")


@dataclass(frozen=True, slots=True)
class PrefillView:
    """One prefill instance, as the scheduler sees it for one request."""

    name: str
    queue_s: float  # estimated wait before the request's prefill could start there
    local_prefix_tokens: int  # leading prompt tokens it holds itself (HBM or its node's DRAM)
    outstanding: int  # requests queued or computing there


@dataclass(frozen=True, slots=True)
class DecodeView:
    """One decode instance."""

    name: str
    running: int
    kv_free_tokens: int  # KV tokens it can still take
    step_s: float  # estimated decode step (TBT) with the request added now
    predicted_step_s: float  # the same when the request would arrive (prediction-based rejection)
    predicted_kv_free_tokens: int = 0  # KV room predicted for when the request would arrive


@dataclass(frozen=True, slots=True)
class PrefixSource:
    """Where the longest cached prefix of a request is, cluster-wide."""

    tokens: int  # leading prompt tokens cached somewhere in the pool
    where: str  # e.g. "pool" (remote DRAM) or "" when nothing is cached


class PDClusterView(Protocol):
    """What a driver exposes to a disaggregation scheduler for one request."""

    def prefill_views(self) -> Sequence[PrefillView]: ...

    def decode_views(self, prompt_tokens: int, after_s: float) -> Sequence[DecodeView]: ...

    def global_prefix(self) -> PrefixSource: ...

    def prefill_time_s(self, index: int, prompt_tokens: int, cached_tokens: int) -> float: ...

    def load_time_s(self, index: int, local_tokens: int, fetched_tokens: int) -> float:
        """Time to bring ``local_tokens`` of the instance's own cached prefix plus ``fetched_tokens``
        more from the pool into its HBM before the prefill."""
        ...


@dataclass(frozen=True, slots=True)
class PDDecision:
    """The scheduler's answer for one request."""

    prefill: int  # index into prefill_views()
    decode: Optional[int]  # index into decode_views(); None when none has room (the driver waits) or not asked
    reuse_tokens: int  # prompt tokens of cached KV the prefill reuses
    fetch_tokens: int  # of those, tokens fetched from the pool (not held by the prefill instance)
    est_ttft_s: float
    est_tbt_s: float
    reject: str = ""  # non-empty: refuse the request (HTTP 429) for this reason


def decode_load(decodes: Sequence[DecodeView], tbt_slo_s: Optional[float], predicted: bool = False) -> float:
    """The decode pool's load (Mooncake's TBT ratio): the mean over decode instances of the estimated step
    time, current or ``predicted``, divided by the TBT SLO; 0 without an SLO or decode instances."""
    if not decodes or not tbt_slo_s:
        return 0.0
    steps = [d.predicted_step_s if predicted else d.step_s for d in decodes]
    return sum(steps) / len(steps) / tbt_slo_s


def decode_overloaded(decodes: Sequence[DecodeView], tbt_slo_s: Optional[float], predicted: bool = False,
                      threshold: float = 1.0) -> bool:
    """True when no decode instance has room for the request's KV or the pool's load (:func:`decode_load`)
    exceeds ``threshold`` (a TBT ratio: 1 is the TBT SLO)."""
    if _best_decode(decodes, predicted) is None:
        return True
    return decode_load(decodes, tbt_slo_s, predicted) > threshold


def check_decode_load_threshold(threshold: float) -> float:
    """``threshold`` as a float when it is a finite number > 0 (a TBT ratio); ``ValueError`` otherwise."""
    value = float(threshold)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"decode_load_threshold must be a finite number > 0 (a TBT ratio: 1 is the TBT SLO), "
                         f"got {threshold}")
    return value


def _best_decode(decodes: Sequence[DecodeView], predicted: bool = False) -> Optional[int]:
    best, best_step = None, math.inf
    for i, d in enumerate(decodes):
        if (d.predicted_kv_free_tokens if predicted else d.kv_free_tokens) < 0:
            continue
        step = d.predicted_step_s if predicted else d.step_s
        if step < best_step:
            best, best_step = i, step
    return best


class PDScheduler:
    """Prefill choice, prefix reuse and admission for one disaggregated deployment (see the module docs)."""

    def __init__(self, policy: str = "conductor", rejection: str = "none", ttft_slo_s: Optional[float] = None,
                 tbt_slo_s: Optional[float] = None, kvcache_balancing_threshold: float = 2.0,
                 seed: int = 0, pick_decode: bool = True, decode_load_threshold: float = 1.0) -> None:
        if policy not in PD_POLICY_NAMES:
            raise ValueError(f"unknown disaggregation policy {policy!r}; known: {', '.join(PD_POLICY_NAMES)}")
        if rejection not in REJECTION_MODES:
            raise ValueError(f"unknown rejection mode {rejection!r}; known: {', '.join(REJECTION_MODES)}")
        if kvcache_balancing_threshold < 1:
            raise ValueError(f"kvcache_balancing_threshold must be >= 1, got {kvcache_balancing_threshold}")
        self.policy = policy
        self.rejection = rejection
        self.ttft_slo_s = ttft_slo_s
        self.tbt_slo_s = tbt_slo_s
        self.threshold = float(kvcache_balancing_threshold)
        # the decode pool is overloaded above this average TBT ratio (early, predictive; the driver's baseline check)
        self.decode_load_threshold = check_decode_load_threshold(decode_load_threshold)
        self.seed = seed
        # False: the driver picks the decode instance itself when the prefill ends (the simulator), so
        # decode views are only read when admission needs them
        self.pick_decode = pick_decode
        self._rng = np.random.default_rng(seed)
        self._k = 0

    # -- prefill choice ---------------------------------------------------------------------------
    def _reuse(self, view: PDClusterView, i: int, prompt: int, local: int, fetch_upto: int) -> tuple[float, int, int]:
        """(estimated prefill + load seconds, reused tokens, fetched tokens) for instance ``i``.

        Reuses the cached prefix only when loading it beats recomputing it (Eq. 2 break-even)."""
        cold = view.prefill_time_s(i, prompt, 0)
        best = (cold, 0, 0)
        local = min(local, prompt)
        if local > 0:
            t = view.prefill_time_s(i, prompt, local) + view.load_time_s(i, local, 0)
            if t < best[0]:
                best = (t, local, 0)
        fetch = min(fetch_upto, prompt) - local
        if fetch > 0:
            t = view.prefill_time_s(i, prompt, local + fetch) + view.load_time_s(i, local, fetch)
            if t < best[0]:
                best = (t, local + fetch, fetch)
        return best

    def choose(self, prompt_tokens: int, view: PDClusterView) -> PDDecision:
        """Decide for one request of ``prompt_tokens`` tokens."""
        prefills = view.prefill_views()
        n = len(prefills)
        if n == 0:
            raise ValueError("cannot schedule: no prefill instances")
        glob = view.global_prefix() if self.policy == "conductor" else PrefixSource(0, "")
        if self.policy == "random":
            chosen = int(self._rng.integers(n))
        elif self.policy == "round_robin":
            chosen = self._k % n
            self._k += 1
        elif self.policy == "load_balancing":
            chosen = min(range(n), key=lambda i: (prefills[i].queue_s, prefills[i].outstanding, i))
        elif self.policy == "prefix_match":
            chosen = min(range(n), key=lambda i: (-min(prefills[i].local_prefix_tokens, prompt_tokens),
                                                  prefills[i].queue_s, i))
        else:
            chosen = -1
        if chosen >= 0:
            p = prefills[chosen]
            cost, reuse, fetch = self._reuse(view, chosen, prompt_tokens, p.local_prefix_tokens, 0)
            est_ttft = p.queue_s + cost
        else:
            est_ttft, reuse, fetch = math.inf, 0, 0
            for i, p in enumerate(prefills):
                upto = 0
                if self.policy == "conductor" and glob.tokens > self.threshold * max(p.local_prefix_tokens, 1) - 1e-9:
                    upto = glob.tokens
                cost, r, f = self._reuse(view, i, prompt_tokens, p.local_prefix_tokens, upto)
                ttft = p.queue_s + cost
                if ttft < est_ttft:  # exact: equal estimates go to the first instance
                    est_ttft, reuse, fetch, chosen = ttft, r, f, i
        predicted = self.rejection == "predictive"
        needs_decode = self.pick_decode or self.rejection in ("early", "predictive")
        decodes = view.decode_views(prompt_tokens, est_ttft if predicted else 0.0) if needs_decode else []
        d = _best_decode(decodes, predicted)
        est_tbt = math.nan if d is None else (decodes[d].predicted_step_s if predicted else decodes[d].step_s)
        reject = ""
        if self.rejection != "none":
            if self.ttft_slo_s is not None and est_ttft > self.ttft_slo_s:
                reject = f"estimated TTFT {est_ttft:.3f} s exceeds the SLO {self.ttft_slo_s:g} s"
            elif self.rejection != "baseline" and decodes and decode_overloaded(
                    decodes, self.tbt_slo_s, predicted, self.decode_load_threshold):
                reject = ("decode instances overloaded" + (" (predicted)" if predicted else "")
                          + (f": average TBT ratio {decode_load(decodes, self.tbt_slo_s, predicted):.2f} > "
                             f"{self.decode_load_threshold:g}"
                             if d is not None and self.tbt_slo_s is not None else ": no KV room"))
        return PDDecision(prefill=chosen, decode=d, reuse_tokens=reuse, fetch_tokens=fetch,
                          est_ttft_s=est_ttft, est_tbt_s=est_tbt, reject=reject)

    def describe(self) -> dict[str, Any]:
        return {"name": self.policy, "rejection": self.rejection, "ttft_slo_s": self.ttft_slo_s,
                "tbt_slo_s": self.tbt_slo_s, "kvcache_balancing_threshold": self.threshold,
                "decode_load_threshold": self.decode_load_threshold, "seed": self.seed}
