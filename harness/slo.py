"""Service-level objectives: per-request latency bounds and the attainment target a run is judged by.

The metric definitions the bounds refer to are in ``docs/metrics.md``; ``harness.metrics`` applies them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional

# The latency bounds an SLO may set; each names a per-request column of ``harness.metrics.request_frame``.
BOUND_KEYS = ("ttft_ms", "tpot_ms", "tbt_ms", "e2e_ms")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class SLOConfig:
    """Latency bounds in milliseconds; ``None`` means the metric is not constrained.

    A request meets the SLO when it finished ``ok`` and every configured bound holds (``value <= bound``).
    ``attainment_target`` is the fraction of issued requests that must meet it (DistServe uses 0.9).
    """

    name: str = "none"
    ttft_ms: Optional[float] = None  # time to first token, from the scheduled arrival
    tpot_ms: Optional[float] = None  # time per output token after the first
    tbt_ms: Optional[float] = None  # Mooncake TBT: mean of the slowest 10% of a request's intervals
    e2e_ms: Optional[float] = None  # end-to-end latency, from the scheduled arrival
    attainment_target: float = 0.9

    def __post_init__(self) -> None:
        for key in BOUND_KEYS:
            value = getattr(self, key)
            if value is None:
                continue
            if not _is_number(value):
                raise ValueError(f"slo.{key}: must be a number or null, got {value!r}")
            if not value > 0:  # also rejects NaN
                raise ValueError(f"slo.{key}: must be > 0, got {value:g}")
        target = self.attainment_target
        if not _is_number(target):
            raise ValueError(f"slo.attainment_target: must be a number, got {target!r}")
        if not 0 < target <= 1:
            raise ValueError(f"slo.attainment_target: must be in (0, 1], got {target:g}")

    @property
    def bounds(self) -> dict[str, float]:
        """The configured bounds only, keyed by metric column (``ttft_ms`` ...)."""
        return {key: float(getattr(self, key)) for key in BOUND_KEYS if getattr(self, key) is not None}

    @property
    def is_empty(self) -> bool:
        """True when no latency bound is configured (every ``ok`` request then meets the SLO)."""
        return not self.bounds

    def scaled(self, factor: float) -> SLOConfig:
        """Return a copy with every latency bound multiplied by ``factor`` (DistServe's "SLO scale").

        The attainment target is unchanged; the name gets an ``@<factor>x`` suffix so that scaled
        copies stay distinguishable in results.
        """
        if not _is_number(factor) or not math.isfinite(factor) or factor <= 0:
            raise ValueError(f"slo scale factor: must be a finite number > 0, got {factor!r}")
        scaled_bounds = {key: value * factor for key, value in self.bounds.items()}
        return replace(self, name=f"{self.name}@{factor:g}x", **scaled_bounds)
