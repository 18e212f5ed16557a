"""The least-outstanding choice's state: the outstanding-count index a driver keeps (:class:`OutstandingIndex`)
and the round-robin tie breaker (:class:`TieBreaker`). Part of the routing contract of
:mod:`systems.policies.base`, which re-exports them; a module of its own, with no imports from the
policies, so that it compiles with the simulator's core (:mod:`systems.compiled_core`), where it runs once per
request.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence


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
