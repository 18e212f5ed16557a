"""Chained prefix-block hashes: the keys cache-aware routing matches prompts on.

The hash of block ``k`` depends on the salt and on every block up to and including ``k`` (like vLLM's
prefix-cache keys), so two prompts share hash ``k`` exactly when they share their first ``k + 1``
blocks. Hashes are 63-bit non-negative ints (they fit an ``int64`` array), computed with
:func:`hashlib.blake2b` over a fixed little-endian byte encoding, so they are identical in every
process and on every machine (Python's ``hash()`` is not: it is randomised per process).

Three kinds of content are hashed, each in its own domain so they never collide with each other:

* token ids (:func:`block_hashes`): only the *full* blocks of ``block_size`` tokens; a trailing partial
  block is not hashed (engines only reuse full blocks);
* a workload's precomputed block ids (:func:`chain_block_ids`, :func:`spec_block_hashes`), so the
  simulator can route ``RequestSpec``s without synthesising tokens;
* raw bytes (:func:`byte_block_hashes`), for text prompts the router cannot tokenise.

A salt (e.g. the tenant) changes the root of the chain, so different salts give unrelated hashes.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from typing import Protocol

__all__ = [
    "HASH_MASK",
    "block_hashes",
    "byte_block_hashes",
    "chain_block_ids",
    "spec_block_hashes",
]

HASH_MASK = (1 << 63) - 1  # hashes are non-negative and fit an int64
_DIGEST_SIZE = 8
_TOKENS, _IDS, _BYTES = b"T", b"I", b"B"  # content domains


def _root(salt: str, domain: bytes) -> bytes:
    return hashlib.blake2b(
        b"disagg-bench/prefix/v1" + domain + salt.encode("utf-8"), digest_size=_DIGEST_SIZE
    ).digest()


def _chain(parent: bytes, chunks: Sequence[bytes | memoryview]) -> tuple[int, ...]:
    out = []
    for chunk in chunks:
        h = hashlib.blake2b(parent, digest_size=_DIGEST_SIZE)
        h.update(chunk)
        parent = h.digest()
        out.append(int.from_bytes(parent, "little") & HASH_MASK)
    return tuple(out)


def _int64_bytes(values: Sequence[int]) -> memoryview:
    """Little-endian int64 encoding; ``ValueError`` on a non-integer or a value beyond int64."""
    try:
        return memoryview(struct.pack(f"<{len(values)}q", *values))  # fastest stdlib encoder measured
    except struct.error as exc:
        raise ValueError(f"ids must be integers in the int64 range: {exc}") from None


def block_hashes(token_ids: Sequence[int], block_size: int, salt: str = "") -> tuple[int, ...]:
    """Chained hashes of the full ``block_size``-token blocks of a prompt (``len // block_size`` of them)."""
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    n_full = len(token_ids) // block_size
    if n_full == 0:
        return ()
    raw = _int64_bytes(token_ids)
    step = 8 * block_size
    return _chain(_root(salt, _TOKENS), [raw[i * step : (i + 1) * step] for i in range(n_full)])


def chain_block_ids(block_ids: Sequence[int], salt: str = "") -> tuple[int, ...]:
    """Chained hashes of a sequence of block ids (one hash per id, chained like :func:`block_hashes`).

    Use it for a workload's ``hash_ids``: the ids need not be chained already; the result is.
    """
    if len(block_ids) == 0:
        return ()
    raw = _int64_bytes(block_ids)
    return _chain(_root(salt, _IDS), [raw[i * 8 : (i + 1) * 8] for i in range(len(block_ids))])


def byte_block_hashes(data: bytes, chunk_bytes: int, salt: str = "") -> tuple[int, ...]:
    """Chained hashes of the full ``chunk_bytes``-byte chunks of ``data`` (a trailing partial chunk is dropped)."""
    if chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
    view = memoryview(data)
    n_full = len(data) // chunk_bytes
    return _chain(_root(salt, _BYTES), [view[i * chunk_bytes : (i + 1) * chunk_bytes] for i in range(n_full)])


class _SpecLike(Protocol):
    hash_ids: tuple[int, ...]
    input_length: int
    block_size: int
    tenant: str


def spec_block_hashes(spec: _SpecLike, full_blocks_only: bool = True) -> tuple[int, ...]:
    """Chained hashes of a ``RequestSpec``'s ``hash_ids``, salted with its tenant.

    With ``full_blocks_only`` (default) a trailing partial block (``input_length`` not a multiple of
    ``block_size``) is left out, matching what :func:`block_hashes` does for token ids.
    """
    ids = spec.hash_ids
    if full_blocks_only and spec.block_size > 0:
        ids = ids[: min(len(ids), spec.input_length // spec.block_size)]
    return chain_block_ids(ids, salt=spec.tenant)
