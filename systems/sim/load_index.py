"""Indexes over a cluster's instances that let a choice skip the instances it cannot pick.

A choice "the instance with the smallest ``key``, ties to the lowest index" over ``n`` instances is a scan;
these structures answer it in about ``log n`` steps instead, and they answer it *identically*: the key is
the same tuple of the same values the scan compares, ending with the instance's index, so equal keys go to
the lowest index exactly as ``min(..., key=...)`` does.

* :class:`SortedPool` keeps members sorted by their key tuple. The driver re-keys an instance whenever its
  state may have changed (the cluster collects the instances an event touched and re-keys them before the
  next choice: lazy invalidation), so the first entry is always the scan's answer, and walking the entries
  in order finds the best member of any subset.
* :class:`BatchBuckets` groups decode instances by batch size, each group sorted by context, the groups
  ordered by a lower bound of the step time of their members (the step at the group's smallest context):
  a choice by estimated step time evaluates one member per group, and only for the groups whose bound is
  not already beaten.
* :class:`BlockHolders` maps each cached block key to the set of pool positions whose cache holds it, as a
  bit set (a Python ``int``, bit ``i`` for position ``i``); cache-aware choices intersect these sets along a
  request's chained keys instead of asking every instance how long a prefix it holds. A block held by one
  cache maps to that cache's own bit object (most blocks on a large cluster: no integer of 512 bits made
  and later read back per block).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Optional

from systems.policies.block_lru import BlockLRU

Key = tuple[Any, ...]


class SortedPool:
    """Members (objects with an ``index``) sorted by ``key(member)``, a tuple whose last item is ``member.index``.

    ``update`` re-keys a member (anything else is ignored); ``add`` / ``discard`` change membership.
    Keys must be totally ordered (no NaN)."""

    __slots__ = ("_entry", "_items", "key")

    def __init__(self, key: Callable[[Any], Key], members: Iterable[Any] = ()) -> None:
        self.key = key
        self._entry: dict[int, Key] = {}
        for m in members:
            self._entry[m.index] = key(m)
        self._items: list[Key] = sorted(self._entry.values())

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, member: Any) -> bool:
        return member.index in self._entry

    def __iter__(self) -> Iterator[Key]:
        """The entries (key tuples), smallest first."""
        return iter(self._items)

    def update(self, member: Any) -> None:
        old = self._entry.get(member.index)
        if old is None:
            return
        new = self.key(member)
        if new != old:
            items = self._items
            del items[bisect_left(items, old)]
            insort(items, new)
            self._entry[member.index] = new

    def add(self, member: Any) -> None:
        if member.index not in self._entry:
            new = self.key(member)
            self._entry[member.index] = new
            insort(self._items, new)

    def discard(self, member: Any) -> None:
        old = self._entry.pop(member.index, None)
        if old is not None:
            del self._items[bisect_left(self._items, old)]

    def first(self) -> Optional[Key]:
        """The smallest entry, or None when the pool is empty."""
        return self._items[0] if self._items else None


class BatchBuckets:
    """Members grouped by ``state(member) = (batch, context)``: per batch a list of ``(context, index)``
    sorted; the batches ordered by ``bound(batch, smallest context)``, recomputed when a batch's smallest
    context changes (lazily, on the next :meth:`ordered`). ``bound`` must not exceed what the choice
    computes for any member of that batch (see :class:`~systems.sim.simulation.Simulation`'s decode choice)."""

    __slots__ = ("_bound", "_bound_of", "_bounds", "_buckets", "_stale", "_state", "_where")

    def __init__(self, state: Callable[[Any], tuple[int, int]], bound: Callable[[int, int], float],
                 members: Iterable[Any] = ()) -> None:
        self._state = state
        self._bound = bound
        self._where: dict[int, tuple[int, int]] = {}
        self._buckets: dict[int, list[tuple[int, int]]] = {}
        self._bounds: list[tuple[float, int]] = []
        self._bound_of: dict[int, tuple[float, int]] = {}
        self._stale: set[int] = set()
        for m in members:
            self._insert(self._state(m), m.index)

    def __contains__(self, member: Any) -> bool:
        return member.index in self._where

    def update(self, member: Any) -> None:
        old = self._where.get(member.index)
        if old is None:
            return
        new = self._state(member)
        if new != old:
            self._remove(old, member.index)
            self._insert(new, member.index)

    def _insert(self, state: tuple[int, int], index: int) -> None:
        batch, context = state
        items = self._buckets.get(batch)
        if items is None:
            self._buckets[batch] = [(context, index)]
            self._stale.add(batch)
        else:
            entry = (context, index)
            pos = bisect_left(items, entry)
            items.insert(pos, entry)
            if pos == 0:
                self._stale.add(batch)
        self._where[index] = state

    def _remove(self, state: tuple[int, int], index: int) -> None:
        batch, context = state
        items = self._buckets[batch]
        pos = bisect_left(items, (context, index))
        del items[pos]
        if pos == 0:
            self._stale.add(batch)
        del self._where[index]

    def ordered(self) -> Iterator[tuple[float, int, list[tuple[int, int]]]]:
        """``(bound, batch, [(context, index), ...])`` per non-empty batch, smallest bound first."""
        if self._stale:
            bounds, bound_of, buckets = self._bounds, self._bound_of, self._buckets
            for batch in self._stale:
                old = bound_of.pop(batch, None)
                if old is not None:
                    del bounds[bisect_left(bounds, old)]
                items = buckets[batch]
                if items:
                    entry = (self._bound(batch, items[0][0]), batch)
                    insort(bounds, entry)
                    bound_of[batch] = entry
                else:
                    del buckets[batch]
            self._stale.clear()
        buckets = self._buckets
        return ((bound, batch, buckets[batch]) for bound, batch in self._bounds)


class BlockHolders:
    """Block key -> bit set of the pool positions whose cache holds it (see the module docstring)."""

    __slots__ = ("bits",)

    def __init__(self) -> None:
        self.bits: dict[int, int] = {}

    def hooks(self, position: int) -> tuple[Callable[[int], None], Callable[[int], None]]:
        """``(on_insert, on_evict)`` for the cache at ``position`` (a ``BlockLRU``'s callbacks)."""
        bits = self.bits
        bit = 1 << position

        def inserted(key: int) -> None:
            held = bits.setdefault(key, bit)
            if held is not bit:
                bits[key] = held | bit

        def evicted(key: int) -> None:
            left = bits[key] ^ bit
            if left:
                bits[key] = left
            else:
                del bits[key]

        return inserted, evicted

    def cache(self, position: int, capacity: int) -> BlockLRU:
        """A ``BlockLRU`` of ``capacity`` blocks for the cache at ``position``, its blocks kept in :attr:`bits`
        (the same as ``BlockLRU(capacity, on_evict=..., on_insert=...)`` with :meth:`hooks`, without a call per
        block)."""
        return HeldBlockLRU(capacity, self.bits, 1 << position)


class HeldBlockLRU(BlockLRU):
    """A ``BlockLRU`` that keeps a :class:`BlockHolders`' bit sets itself (see :meth:`BlockHolders.cache`)."""

    __slots__ = ("_bit", "_bits")

    def __init__(self, capacity: int, bits: dict[int, int], bit: int) -> None:
        super().__init__(capacity)
        self._bits = bits
        self._bit = bit

    def record(self, hashes: Any) -> None:
        """``BlockLRU.record``, its insert and evict hooks inlined."""
        blocks = self._blocks
        bits, bit = self._bits, self._bit
        for h in reversed(hashes):
            if h in blocks:
                blocks.move_to_end(h)
            else:
                blocks[h] = None
                held = bits.setdefault(h, bit)  # one lookup; a block only this cache holds shares the bit itself
                if held is not bit:
                    bits[h] = held | bit
        capacity = self.capacity
        if capacity is not None and len(blocks) > capacity:
            pop = blocks.popitem
            while len(blocks) > capacity:
                evicted, _ = pop(last=False)
                left = bits[evicted] ^ bit
                if left:
                    bits[evicted] = left
                else:
                    del bits[evicted]


def run_levels(keys: Iterable[int], full: int, first: dict[int, int],
               second: Optional[dict[int, int]] = None) -> list[tuple[int, int]]:
    """Split the positions of ``full`` by how many leading ``keys`` they hold (in ``first`` or ``second``):
    ``[(run, positions whose run is exactly run), ...]`` for every non-empty level, shortest run first."""
    out: list[tuple[int, int]] = []
    if not full:
        return out
    cur = full
    run = 0
    for key in keys:
        held = first.get(key, 0)
        if second:
            held |= second.get(key, 0)
        nxt = cur & held
        if nxt != cur:
            out.append((run, cur ^ nxt))
            if not nxt:
                return out
        cur = nxt
        run += 1
    out.append((run, cur))
    return out


def iter_bits(mask: int) -> Iterator[int]:
    """Positions of the set bits of ``mask``, lowest first."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low
