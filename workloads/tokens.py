"""Token synthesis: deterministic prompt token ids from hash ids, and rescaling of hash blocks.

Each hash id names a block of content. :func:`prompt_token_ids` turns it into ``block_size`` token ids with
a vectorised integer hash (splitmix64 of seed, hash id and position in the block), so the same hash id gives
the same tokens in every request and shared prefixes are identical token for token (what a real prefix
cache keys on).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from vocab.records import RequestSpec

_MASK64 = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_POSITION_SALT = np.uint64(0xD1B54A32D192ED03)


@dataclass(frozen=True)
class VocabSpec:
    """The token ids a synthetic prompt may use: ``[min_token_id, vocab_size)`` minus ``special_token_ids``."""

    vocab_size: int
    special_token_ids: tuple[int, ...] = ()
    min_token_id: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "special_token_ids", tuple(int(t) for t in self.special_token_ids))
        if self.vocab_size < 1:
            raise ValueError(f"vocab_size must be >= 1, got {self.vocab_size}")
        if not 0 <= self.min_token_id < self.vocab_size:
            raise ValueError(
                f"min_token_id must be in [0, vocab_size={self.vocab_size}), got {self.min_token_id}"
            )
        if self.n_allowed < 1:
            raise ValueError("no token id left: every id in [min_token_id, vocab_size) is special")

    @property
    def excluded_ids(self) -> np.ndarray:
        """Sorted, distinct special ids that fall inside ``[min_token_id, vocab_size)``."""
        ids = np.unique(np.asarray(self.special_token_ids, dtype=np.int64))
        return ids[(ids >= self.min_token_id) & (ids < self.vocab_size)]

    @property
    def n_allowed(self) -> int:
        return self.vocab_size - self.min_token_id - len(self.excluded_ids)

    def allowed_id(self, index: np.ndarray) -> np.ndarray:
        """Map indices in ``[0, n_allowed)`` onto the allowed ids in increasing order (vectorised)."""
        excluded = self.excluded_ids
        # excluded[j] has exactly (excluded[j] - min_token_id - j) allowed ids below it.
        allowed_below = excluded - self.min_token_id - np.arange(len(excluded), dtype=np.int64)
        index = np.asarray(index, dtype=np.int64)
        return self.min_token_id + index + np.searchsorted(allowed_below, index, side="right")


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, element-wise on uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


def prompt_token_ids(spec: RequestSpec, vocab: VocabSpec, seed: int = 0) -> np.ndarray:
    """The ``spec.input_length`` prompt token ids of ``spec`` (int32 when the vocabulary fits, else int64).

    Block ``i`` holds ``spec.block_size`` tokens derived from ``(seed, hash_ids[i], position)`` only; the last
    block is cut to the remaining length. Requires ``len(hash_ids) == ceil(input_length / block_size)``.
    """
    if spec.block_size < 1:
        raise ValueError(f"request {spec.request_id}: block_size must be >= 1, got {spec.block_size}")
    if len(spec.hash_ids) != spec.n_blocks:
        raise ValueError(
            f"request {spec.request_id}: {len(spec.hash_ids)} hash ids for input_length={spec.input_length}, "
            f"expected ceil({spec.input_length} / {spec.block_size}) = {spec.n_blocks}"
        )
    seed_key = _splitmix64(np.array([int(seed) & _MASK64], dtype=np.uint64))[0]
    ids = np.array([h & _MASK64 for h in spec.hash_ids], dtype=np.uint64)
    block_keys = _splitmix64(ids ^ seed_key)
    positions = np.arange(spec.input_length, dtype=np.int64)
    block = positions // spec.block_size
    offset = (positions - block * spec.block_size).astype(np.uint64)
    with np.errstate(over="ignore"):
        mixed = _splitmix64(block_keys[block] ^ (offset * _POSITION_SALT))
    index = (mixed % np.uint64(vocab.n_allowed)).astype(np.int64)
    tokens = vocab.allowed_id(index)
    dtype = np.int32 if vocab.vocab_size <= np.iinfo(np.int32).max else np.int64
    return tokens.astype(dtype)


def _scale_length(length: int, block_size: int, block_tokens: int) -> int:
    """Full blocks become ``block_tokens`` tokens; a partial block of r tokens becomes ceil(r * bt / bs)."""
    full, rest = divmod(length, block_size)
    return full * block_tokens + -(-rest * block_tokens // block_size)


def scale_blocks(spec: RequestSpec, block_tokens: int) -> RequestSpec:
    """``spec`` with blocks of ``block_tokens`` tokens: same hash ids, same number of blocks.

    ``input_length`` and ``shared_prefix_len`` are rescaled block by block (a partial last block of r tokens
    becomes ``ceil(r * block_tokens / block_size)``); ``output_length`` is unchanged.
    """
    if block_tokens < 1:
        raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
    if block_tokens == spec.block_size:
        return spec
    new_len = _scale_length(spec.input_length, spec.block_size, block_tokens)
    new_prefix = _scale_length(spec.shared_prefix_len, spec.block_size, block_tokens)
    scaled = dataclasses.replace(
        spec, input_length=new_len, shared_prefix_len=new_prefix, block_size=block_tokens
    )
    assert math.ceil(new_len / block_tokens) == spec.n_blocks or spec.input_length == 0
    return scaled
