"""Stopping a probe once it has provably failed the Splitwise SLO (``study.params.early_stop``).

A probe fails when any p<q> slowdown exceeds its bound. For TTFT and E2E the simulation decides some
requests' slowdowns before it ends: once ``now`` is past a request's deadline (its arrival plus bound x its
uncontended latency) and its first token (TTFT) or its finish (E2E) had not come by then, its slowdown is
above the bound whatever happens next (a request that fails counts as above every bound). numpy's linear
percentile of ``n`` values is at least the value of rank ``floor(q / 100 x (n - 1))``, so once ``n - that
rank`` requests are decided above the bound the percentile is too and the probe fails: the simulation stops
there (:mod:`systems.sim.stop_rule`), its row in ``probes.csv`` says why and when, and the search goes on as it
would have after the whole simulation, since the verdict is the same. TBT is left to the end of the run (a
request's mean interval is not known before its last token). One rank of margin and a relative margin of
1e-9 on every deadline keep rounding from ever deciding a request that ends exactly at its bound.

Each (metric, bound) keeps its requests sorted by deadline and a pointer past those already judged, so a run
reads every request's time at most once per bound: about 1 % of a probe's time on the Azure hour.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Optional

import numpy as np

from harness.studies.splitwise_provisioning.params import ProvisioningParams
from harness.studies.splitwise_provisioning.slowdown import UncontendedReference
from systems.sim.request import SimRequest
from workloads.base import WorkloadRequests

CHECKS_PER_SPAN = 100  # checks over the arrivals' span (then at that interval until the run ends)
DEADLINE_MARGIN = 1e-9  # relative, on bound x uncontended latency
DECIDED_METRICS = {"ttft": "first_token_s", "e2e": "finish_s"}  # metric -> the request's time that decides it


class _Bound:
    """One ``p<q> <metric> <= bound`` of the SLO, judged as the run goes."""

    def __init__(self, metric: str, q: float, bound: float, deadlines: np.ndarray, eligible: np.ndarray,
                 n: int) -> None:
        self.label = f"p{q:g} {metric.upper()} slowdown <= {bound:g}"
        self.time_of = operator.attrgetter(DECIDED_METRICS[metric])
        order = np.flatnonzero(eligible)
        order = order[np.argsort(deadlines[order], kind="stable")]
        self.order = order
        self.deadlines = deadlines[order]
        rank = max(int(math.floor(q / 100.0 * (n - 1))) - 1, 0)  # one rank of margin below numpy's
        self.needed = n - rank
        self.judged = 0  # requests of ``order`` whose deadline has passed
        self.above = 0  # ... of which the slowdown is above the bound

    def advance(self, now: float, requests: Sequence[SimRequest]) -> bool:
        """Judge the requests whose deadline is before ``now``; True once the percentile is decided above."""
        end = int(np.searchsorted(self.deadlines, now, side="left"))
        if end > self.judged:
            picked = map(requests.__getitem__, self.order[self.judged:end].tolist())
            times = np.fromiter(map(self.time_of, picked), dtype=np.float64, count=end - self.judged)
            in_time = times <= self.deadlines[self.judged:end]  # NaN (not yet, or failed first): above
            self.above += int(end - self.judged - np.count_nonzero(in_time))
            self.judged = end
        return self.above >= self.needed


class SlowdownStop:
    """The :class:`~systems.sim.stop_rule.StopRule` of one probe: ``requests`` (at the probe's rate) against the
    SLO of ``params`` (see the module docstring)."""

    def __init__(self, requests: WorkloadRequests, reference: UncontendedReference, params: ProvisioningParams) -> None:
        specs = requests.specs
        n = len(specs)
        arrival = np.fromiter((s.arrival_s for s in specs), dtype=np.float64, count=n)
        inputs = np.fromiter((s.input_length for s in specs), dtype=np.int64, count=n)
        outputs = np.fromiter((s.output_length for s in specs), dtype=np.int64, count=n)
        ref_ms = reference.latencies_ms(inputs, outputs)
        eligible = (outputs >= 1) & np.isfinite(arrival)
        self.bounds: list[_Bound] = []
        for metric in DECIDED_METRICS:
            ref_s = ref_ms[metric] / 1e3
            eligible_m = eligible & np.isfinite(ref_s) & (ref_s > 0)
            for q, bound in zip(params.quantiles, params.slowdown_bounds[metric], strict=True):
                deadlines = arrival + bound * ref_s * (1 + DEADLINE_MARGIN)
                self.bounds.append(_Bound(metric, q, bound, deadlines, eligible_m, n))
        span = float(arrival.max()) if n else 0.0
        self.interval_s = span / CHECKS_PER_SPAN if span > 0 else 1.0
        self.n = n

    def __call__(self, now: float, requests: Sequence[SimRequest]) -> Optional[str]:
        for b in self.bounds:
            if b.advance(now, requests):
                return (f"{b.label} cannot hold: {b.above} of {self.n} requests already above it "
                        f"({b.needed} decide it)")
        return None
