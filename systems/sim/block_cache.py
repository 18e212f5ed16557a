"""An LRU set of KV blocks with a capacity in blocks: one tier of a prefix cache (HBM, DRAM).

Keys are the request's chained block keys (a key names a block *and* everything before it), so the
leading blocks present are exactly the reusable prefix.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Optional


class LRUBlockCache:
    """Blocks with least-recently-used eviction. ``on_evict`` is told about every evicted key."""

    __slots__ = ("_blocks", "capacity", "evictions", "on_evict")

    def __init__(self, capacity_blocks: int, on_evict: Optional[Callable[[int], None]] = None) -> None:
        if capacity_blocks < 0:
            raise ValueError(f"capacity_blocks must be >= 0, got {capacity_blocks}")
        self.capacity = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.on_evict = on_evict
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, key: object) -> bool:
        return key in self._blocks

    def prefix_len(self, keys: Sequence[int], start: int = 0) -> int:
        """Index of the first of ``keys[start:]`` that is absent (``len(keys)`` when all are present)."""
        blocks = self._blocks
        k = start
        n = len(keys)
        while k < n and keys[k] in blocks:
            k += 1
        return k

    def touch(self, keys: Sequence[int]) -> None:
        """Insert or refresh ``keys`` (``keys[0]`` ends up most recent), evicting the oldest over capacity."""
        if self.capacity == 0:
            return
        blocks = self._blocks
        for key in reversed(keys):
            if key in blocks:
                blocks.move_to_end(key)
            else:
                blocks[key] = None
        over = len(blocks) - self.capacity
        if over > 0:
            self.evictions += over
            on_evict = self.on_evict
            for _ in range(over):
                key, _ = blocks.popitem(last=False)
                if on_evict is not None:
                    on_evict(key)
