"""A set of block hashes with least-recently-recorded eviction: the routed history of cache-aware routing
(:mod:`systems.policies.cache_aware`) and the simulator's HBM and DRAM prefix caches. A module of its own:
it compiles with the simulator's core (:mod:`systems.compiled_core`)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Optional


class BlockLRU:
    """A set of block hashes with least-recently-recorded eviction at ``capacity`` blocks (``None``: unbounded).

    ``on_evict`` (optional) is told every evicted hash, ``on_insert`` (optional) every hash that joins; the
    simulator uses them to track which nodes hold a block.
    """

    __slots__ = ("_blocks", "capacity", "on_evict", "on_insert")

    def __init__(self, capacity: Optional[int] = None, on_evict: Optional[Callable[[int], None]] = None,
                 on_insert: Optional[Callable[[int], None]] = None) -> None:
        if capacity is not None and capacity <= 0:
            raise ValueError(f"capacity must be positive or None, got {capacity}")
        self.capacity = capacity
        self.on_evict = on_evict
        self.on_insert = on_insert
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block_hash: object) -> bool:
        return block_hash in self._blocks

    def prefix_len(self, hashes: Sequence[int]) -> int:
        """How many leading ``hashes`` are present."""
        blocks = self._blocks
        k = 0
        for h in hashes:
            if h not in blocks:
                break
            k += 1
        return k

    def record(self, hashes: Sequence[int]) -> None:
        """Make ``hashes`` the most recent blocks (``hashes[0]`` most recent of all), evicting the oldest."""
        blocks = self._blocks
        on_insert = self.on_insert
        if on_insert is None:
            for h in reversed(hashes):
                if h in blocks:
                    blocks.move_to_end(h)
                else:
                    blocks[h] = None
        else:
            for h in reversed(hashes):
                if h in blocks:
                    blocks.move_to_end(h)
                else:
                    blocks[h] = None
                    on_insert(h)
        if self.capacity is not None:
            on_evict = self.on_evict
            while len(blocks) > self.capacity:
                evicted, _ = blocks.popitem(last=False)
                if on_evict is not None:
                    on_evict(evicted)
