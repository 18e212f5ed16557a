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
from bisect import bisect_left, insort
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Optional, overload

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


class OutstandingIndex:
    """Instances ``0..n-1`` grouped by outstanding count: for each count present, the bit set (an ``int``, bit
    ``i`` for instance ``i``) of the instances with that count. The driver calls :meth:`set` whenever a count
    may have changed."""

    __slots__ = ("_bucket", "_value", "_values", "n")

    def __init__(self, outstanding: Sequence[int]) -> None:
        self.n = len(outstanding)
        self._value = list(outstanding)
        self._bucket: dict[int, int] = {}
        for i, v in enumerate(self._value):
            self._bucket[v] = self._bucket.get(v, 0) | (1 << i)
        self._values = sorted(self._bucket)  # the counts present, ascending

    def set(self, i: int, outstanding: int) -> None:
        """Instance ``i`` now has ``outstanding`` requests."""
        old = self._value[i]
        if old == outstanding:
            return
        bit = 1 << i
        bucket = self._bucket
        left = bucket[old] ^ bit
        if left:
            bucket[old] = left
        else:
            del bucket[old]
            del self._values[bisect_left(self._values, old)]
        joined = bucket.get(outstanding)
        if joined is None:
            bucket[outstanding] = bit
            insort(self._values, outstanding)
        else:
            bucket[outstanding] = joined | bit
        self._value[i] = outstanding

    def value(self, i: int) -> int:
        return self._value[i]

    def least(self, among: int) -> int:
        """The members of bit set ``among`` whose count is the smallest among them (a bit set; 0 if none)."""
        if among.bit_count() <= 8:  # a few members: read their counts
            best, out = -1, 0
            value = self._value
            m = among
            while m:
                low = m & -m
                v = value[low.bit_length() - 1]
                if best < 0 or v < best:
                    best, out = v, low
                elif v == best:
                    out |= low
                m ^= low
            return out
        bucket = self._bucket
        for v in self._values:
            hit = bucket[v] & among
            if hit:
                return hit
        return 0

    def at_most(self, limit: int) -> int:
        """Bit set of the instances with at most ``limit`` outstanding requests."""
        out = 0
        for v in self._values:
            if v > limit:
                break
            out |= self._bucket[v]
        return out

    def min_value(self) -> int:
        return self._values[0]


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


def _require_instances(instances: Sequence[InstanceLoad]) -> int:
    n = len(instances)
    if n == 0:
        raise ValueError("cannot route: no instances")
    return n


class TieBreaker:
    """Round-robin among tied candidates: the first candidate at or after a rotating pointer wins.

    Deterministic, and it spreads work over idle instances instead of always picking index 0.
    """

    __slots__ = ("_next",)

    def __init__(self) -> None:
        self._next = 0

    def pick(self, candidates: Sequence[int], n: int) -> int:
        """One of ``candidates`` (ascending indices into ``n`` instances); advances the pointer past it."""
        chosen = candidates[0]
        start = self._next % n
        for c in candidates:
            if c >= start:
                chosen = c
                break
        self._next = chosen + 1
        return chosen

    def pick_mask(self, candidates: int, n: int) -> int:
        """:meth:`pick` for candidates given as a non-empty bit set (bit ``i``: instance ``i``)."""
        start = self._next % n
        above = candidates >> start
        chosen = start + (above & -above).bit_length() - 1 if above else (candidates & -candidates).bit_length() - 1
        self._next = chosen + 1
        return chosen


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
