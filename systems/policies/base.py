"""The routing-policy contract: what a driver (simulator or real router) tells a policy and asks of it.

A driver owns the cluster state; a policy only sees a read-only view of it. For every request the
driver calls, in this order and from one thread:

1. ``index = policy.choose(req, instances)`` -- pick one of ``instances`` (a view of every instance,
   in a fixed order: index ``i`` always names the same instance);
2. ``policy.on_routed(req, index)`` -- the request was sent there;
3. ``policy.on_finished(req, index)`` -- it ended there (completed, failed or abandoned).

``choose`` may advance the policy's own decision state (its RNG, a rotation pointer); what was sent
where is recorded in ``on_routed``. Policies are synchronous, deterministic given their seed and the
call sequence, and never read clocks or globals, so the same object runs in the discrete-event
simulator and in the HTTP router.

A driver with many instances may pass an :class:`IndexedLoads` instead of a list: the same sequence of
views (built on demand), plus an :class:`OutstandingIndex` it keeps current. Policies that pick by
outstanding count then answer from the index in about ``log n`` steps instead of scanning every instance,
with the same answer (same values, same tie-breaks); the others read the sequence as before.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Optional, overload

from systems.policies.outstanding import OutstandingIndex, TieBreaker

__all__ = ["IndexedLoads", "InstanceLoad", "OutstandingIndex", "RouteRequest", "RoutingPolicy", "TieBreaker",
           "least_outstanding"]


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """What a policy knows about one request: its prefix-block hashes and size."""

    request_id: int | str
    block_hashes: tuple[int, ...]  # chained hashes of the prompt's full blocks (systems.policies.hashing)
    n_prompt_tokens: int
    tenant: str = ""


@dataclass(frozen=True, slots=True)
class InstanceLoad:
    """Read-only view of one serving instance's load at decision time."""

    name: str
    outstanding: int  # requests routed there and not yet finished
    queued_prompt_tokens: Optional[int] = None  # prompt tokens waiting for prefill, when the driver knows


class IndexedLoads(Sequence[InstanceLoad]):
    """A driver's instances as a sequence of :class:`InstanceLoad` views, each built when read, plus the
    :class:`OutstandingIndex` the driver keeps current (see the module docstring)."""

    __slots__ = ("_n", "_view", "outstanding_index")

    def __init__(self, n: int, view: Callable[[int], InstanceLoad], outstanding_index: OutstandingIndex) -> None:
        if outstanding_index.n != n:
            raise ValueError(f"the index covers {outstanding_index.n} instances, not {n}")
        self._n = n
        self._view = view
        self.outstanding_index = outstanding_index

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> InstanceLoad: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[InstanceLoad]: ...

    def __getitem__(self, i: int | slice) -> InstanceLoad | Sequence[InstanceLoad]:
        if isinstance(i, slice):
            return [self._view(k) for k in range(self._n)[i]]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._view(i)


def _require_instances(instances: Sequence[InstanceLoad]) -> int:
    n = len(instances)
    if n == 0:
        raise ValueError("cannot route: no instances")
    return n


class RoutingPolicy(ABC):
    """Base class of routing policies (see the module docstring for the call contract)."""

    name: ClassVar[str] = ""
    #: where the policy's view of the instances' caches comes from ("none" when it does not model caches)
    source_of_truth: ClassVar[str] = "none"
    #: whether ``choose`` reads ``block_hashes``/``n_prompt_tokens``; when False a driver may leave them
    #: empty (the router then skips parsing and hashing the prompt)
    needs_prompt: ClassVar[bool] = False

    @abstractmethod
    def choose(self, req: RouteRequest, instances: Sequence[InstanceLoad]) -> int:
        """Index into ``instances`` of the instance that should serve ``req``."""

    def on_routed(self, req: RouteRequest, index: int) -> None:  # noqa: B027 (optional hook)
        """``req`` was sent to instance ``index``."""

    def on_finished(self, req: RouteRequest, index: int) -> None:  # noqa: B027 (optional hook)
        """``req`` ended on instance ``index`` (completed, failed or abandoned)."""

    def describe(self) -> dict[str, Any]:
        """Name and parameters, for logs and run summaries."""
        return {"name": self.name, "source_of_truth": self.source_of_truth}


def least_outstanding(
    instances: Sequence[InstanceLoad], ties: TieBreaker, among: Optional[Sequence[int]] = None
) -> int:
    """Index of the instance with the fewest outstanding requests (ties: ``ties``), optionally among ``among``."""
    n = _require_instances(instances)
    if isinstance(instances, IndexedLoads):
        index = instances.outstanding_index
        mask = (1 << n) - 1
        if among is not None:
            mask = 0
            for i in among:
                mask |= 1 << i
        return ties.pick_mask(index.least(mask), n)
    pool = range(n) if among is None else among
    best = min(instances[i].outstanding for i in pool)
    return ties.pick([i for i in pool if instances[i].outstanding == best], n)
