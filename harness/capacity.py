"""The highest load that meets an SLO ("capacity", "goodput", "max rate"), computed one way for the suite.

Two questions, one module:

* **Searching** (:func:`search_max_rate`): a study that can simulate any rate looks for the highest one
  that passes, for a predicate that holds below a threshold. From a start rate it brackets by growing
  (while the rate passes) or shrinking (while it fails), then bisects the bracket. The answer is always
  a rate that was evaluated and passed, so a noisy predicate can only make it conservative. The Splitwise
  provisioning study bisects arithmetically for a fixed number of steps; DistServe's placement search
  geometrically until the bracket is within a relative tolerance, inside ``[min_rate_rps, max_rate_rps]``.
* **Reading a sweep** (:func:`capacity_at`): a study that measured fixed load
  points takes the highest passing point and moves it towards the next, failing point by linear
  interpolation of attainment (Mooncake's effective request capacity, DistServe's per-GPU goodput). A
  :class:`Capacity` says how well the points pin the value down.

Studies compute these and write them into their tables; figures and the report only read them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Optional, TypeVar

import numpy as np
import pandas as pd

T = TypeVar("T")
MIDPOINTS = ("arithmetic", "geometric")


# ---------------------------------------------------------------------------------------------- searching

@dataclass
class RateSearch(Generic[T]):
    """Outcome of :func:`search_max_rate`.

    ``rate_rps``: the highest evaluated rate that passed (0 when none did), ``best`` what the evaluation
    returned there (None when none passed); ``upper_rps``: the lowest evaluated rate above it that failed
    (inf when the search stopped without one); ``probes``: every ``(rate, passed, payload)`` in order.
    """

    rate_rps: float
    upper_rps: float
    best: Optional[T] = None
    probes: list[tuple[float, bool, T]] = field(default_factory=list)

    @property
    def n_evals(self) -> int:
        return len(self.probes)

    @property
    def evaluations(self) -> tuple[tuple[float, T], ...]:
        """``(rate, payload)`` of every evaluation, in order."""
        return tuple((rate, payload) for rate, _, payload in self.probes)


def search_max_rate(evaluate: Callable[[float], tuple[bool, T]], start_rps: float, *, growth: float = 2.0,
                    steps: int = 8, midpoint: str = "geometric", rel_tol: Optional[float] = None,
                    max_expand: Optional[int] = None, min_rate_rps: float = 0.0,
                    max_rate_rps: float = math.inf) -> RateSearch[T]:
    """The highest rate with ``evaluate(rate)[0]`` true, for a predicate that holds below a threshold.

    Bracketing: from ``start_rps`` (clamped to ``[min_rate_rps, max_rate_rps]``) multiply by ``growth``
    while the rate passes (never beyond ``max_rate_rps``) or divide while it fails (never below
    ``min_rate_rps``), at most ``max_expand`` times (None: until the bounds). Without a bracket the search
    ends there. Then at most ``steps`` bisections at the ``midpoint`` (``arithmetic`` or ``geometric``),
    stopping early once ``upper / lower <= 1 + rel_tol`` (when given). A rate is evaluated once.
    """
    if growth <= 1:
        raise ValueError(f"growth must be > 1, got {growth}")
    if midpoint not in MIDPOINTS:
        raise ValueError(f"midpoint must be one of {', '.join(MIDPOINTS)}, got {midpoint!r}")
    if not 0 <= min_rate_rps < max_rate_rps:
        raise ValueError(f"need 0 <= min_rate_rps < max_rate_rps, got {min_rate_rps} and {max_rate_rps}")
    rate = min(max(float(start_rps), min_rate_rps), max_rate_rps)
    if not rate > 0:
        raise ValueError(f"start_rps: must be > 0, got {start_rps}")
    result: RateSearch[T] = RateSearch(0.0, math.inf)
    seen: dict[float, bool] = {}

    def passes(r: float) -> bool:
        if r not in seen:
            ok, payload = evaluate(r)
            seen[r] = bool(ok)
            result.probes.append((r, bool(ok), payload))
            if ok and r > result.rate_rps:
                result.rate_rps, result.best = r, payload
            if not ok:
                result.upper_rps = min(result.upper_rps, r)
        return seen[r]

    expansions = 0
    if passes(rate):
        lo = rate
        while True:
            if lo >= max_rate_rps or (max_expand is not None and expansions >= max_expand):
                return result  # everything passed up to the bound
            nxt = min(lo * growth, max_rate_rps)
            expansions += 1
            if passes(nxt):
                lo = nxt
            else:
                hi = nxt
                break
    else:
        hi = rate
        while True:
            nxt = hi / growth
            if nxt < min_rate_rps or (max_expand is not None and expansions >= max_expand):
                return result  # nothing passed down to the bound
            expansions += 1
            if passes(nxt):
                lo = nxt
                break
            hi = nxt
    for _ in range(steps):
        if rel_tol is not None and hi / lo <= 1 + rel_tol:
            break
        mid = math.sqrt(lo * hi) if midpoint == "geometric" else (lo + hi) / 2
        if passes(mid):
            lo = mid
        else:
            hi = mid
    return result


# ---------------------------------------------------------------------------------------------- reading a sweep

@dataclass(frozen=True)
class Capacity:
    """The highest load meeting an attainment target, read from measured points.

    ``bound`` says how far the points pin it down: ``exact`` (interpolated between a passing and the next,
    failing point), ``at_least`` (the highest measured point still passes: ``value`` is a lower bound) or
    ``below_range`` (even the lowest measured point fails: ``value`` is 0, the true capacity lies below
    ``lowest``).
    """

    value: float
    bound: str
    lowest: float = math.nan
    highest: float = math.nan

    def __str__(self) -> str:
        if self.bound == "at_least":
            return f">={self.value:.3g}"
        if self.bound == "below_range":
            return f"0 (<{self.lowest:.3g})"
        return f"{self.value:.3g}"


def capacity_at(rates: Any, attainment: Any, target: float) -> Capacity:
    """The highest rate whose attainment is >= ``target``: the highest passing measured point, moved
    towards the next (failing) point by linear interpolation of attainment; 0 when every point fails.

    NaN pairs are dropped; the points are sorted by rate. ``ValueError`` when no point remains.
    """
    frame = pd.DataFrame({"rate": np.asarray(rates, dtype=float), "att": np.asarray(attainment, dtype=float)})
    frame = frame.dropna().sort_values("rate", kind="mergesort").reset_index(drop=True)
    if frame.empty:
        raise ValueError("capacity_at: no (rate, attainment) point")
    rate, att = frame["rate"].to_numpy(), frame["att"].to_numpy()
    lowest, highest = float(rate[0]), float(rate[-1])
    passing = np.flatnonzero(att >= target)
    if passing.size == 0:
        return Capacity(0.0, "below_range", lowest, highest)
    i = int(passing[-1])
    if i == len(rate) - 1:
        return Capacity(float(rate[i]), "at_least", lowest, highest)
    r0, r1, a0, a1 = rate[i], rate[i + 1], att[i], att[i + 1]
    value = r0 + (a0 - target) / (a0 - a1) * (r1 - r0) if a0 > a1 else r0
    return Capacity(float(value), "exact", lowest, highest)
