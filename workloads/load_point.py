"""A workload at one load point: the one rule every job that sweeps load uses to set a request rate, a
trace speed-up or a request cap.

* ``rate_rps`` sets the rate of a rate-driven arrival process (``poisson``, ``gamma``). A workload with
  another process (``trace``, ``closed_loop``) only takes a rate when the caller's load points are
  defined as Poisson rates (``as_poisson=True``: the simulator studies' ``study.rates_rps`` and
  ``study.per_gpu_rates``): its arrivals are then replaced by a Poisson process at that rate, keeping the
  requests and the arrival seed. Otherwise it is a :class:`~workloads.errors.WorkloadConfigError` naming
  ``rate_key``.
* ``speedup`` divides ``arrival.time_scale`` (a trace replayed ``speedup`` times faster).
* ``max_requests`` keeps at most that many of the workload's first requests.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from workloads.config import WorkloadConfig
from workloads.errors import WorkloadConfigError
from workloads.registry import to_workload_config

RATE_ARRIVALS = ("poisson", "gamma")


def workload_at(workload: Any, *, rate_rps: Optional[float] = None, speedup: Optional[float] = None,
                max_requests: Optional[int] = None, as_poisson: bool = False,
                rate_key: str = "rate_rps") -> WorkloadConfig:
    """``workload`` (a config dataclass or a composed node) at one load point (see the module docstring)."""
    wcfg = to_workload_config(workload)
    arrival = wcfg.arrival
    if rate_rps is not None:
        if arrival.kind in RATE_ARRIVALS:
            arrival = dataclasses.replace(arrival, rate_rps=float(rate_rps))
        elif as_poisson:
            arrival = dataclasses.replace(arrival, kind="poisson", rate_rps=float(rate_rps))
        else:
            raise WorkloadConfigError(
                f"{rate_key}: sets the rate of a {' or '.join(RATE_ARRIVALS)} arrival process, but workload "
                f"{wcfg.name} has workload.arrival.kind={arrival.kind}")
    if speedup is not None:
        arrival = dataclasses.replace(arrival, time_scale=arrival.time_scale / float(speedup))
    changes: dict[str, Any] = {"arrival": arrival}
    if max_requests is not None:
        changes["max_requests"] = min(max_requests, wcfg.max_requests or max_requests)
    return dataclasses.replace(wcfg, **changes)
