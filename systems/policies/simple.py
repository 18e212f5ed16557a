"""Load-only routing policies: random, round-robin and least-outstanding."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Optional

import numpy as np

from systems.policies.base import InstanceLoad, RouteRequest, RoutingPolicy, TieBreaker, least_outstanding

__all__ = ["LeastOutstandingPolicy", "RandomPolicy", "RoundRobinPolicy"]


class RandomPolicy(RoutingPolicy):
    """Uniformly random instance, from the policy's own ``np.random.Generator`` (reproducible by seed)."""

    name: ClassVar[str] = "random"

    def __init__(self, seed: Optional[int] = 0) -> None:
        self.seed = seed
        self._rng = np.random.default_rng(seed)

    def choose(self, req: RouteRequest, instances: Sequence[InstanceLoad]) -> int:
        if not instances:
            raise ValueError("cannot route: no instances")
        return int(self._rng.integers(len(instances)))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "seed": self.seed}


class RoundRobinPolicy(RoutingPolicy):
    """Instances in turn: the k-th call to ``choose`` returns ``k mod len(instances)``."""

    name: ClassVar[str] = "round_robin"

    def __init__(self) -> None:
        self._k = 0

    def choose(self, req: RouteRequest, instances: Sequence[InstanceLoad]) -> int:
        if not instances:
            raise ValueError("cannot route: no instances")
        index = self._k % len(instances)
        self._k += 1
        return index


class LeastOutstandingPolicy(RoutingPolicy):
    """The instance with the fewest outstanding requests.

    Ties are broken round-robin: among the tied instances, the first one at or after the index after the
    last choice wins. So an idle cluster fed one request at a time cycles 0, 1, 2, ... instead of sending
    everything to instance 0, and the choice stays deterministic.
    """

    name: ClassVar[str] = "least_outstanding"

    def __init__(self) -> None:
        self._ties = TieBreaker()

    def choose(self, req: RouteRequest, instances: Sequence[InstanceLoad]) -> int:
        return least_outstanding(instances, self._ties)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "tie_break": "round_robin"}
