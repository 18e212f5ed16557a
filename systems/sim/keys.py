"""Prefix-cache keys of a request in the simulator: one int per full prompt block, chained.

Key ``k`` stands for blocks ``0..k`` of the prompt, salted by the tenant, so two requests share key
``k`` exactly when they share their first ``k + 1`` blocks and their tenant. Python's hash of a tuple
of ints is deterministic (hash randomisation only affects str and bytes), and the tenant enters as a
fixed blake2b digest, so keys are identical in every run. These are cheaper than
``systems.policies.hashing`` (which real routers use, because they must agree across processes on
token content) and carry the same information for specs whose ``hash_ids`` already name blocks.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

from vocab.records import RequestSpec


@lru_cache(maxsize=1024)
def tenant_salt(tenant: str) -> int:
    """A stable 63-bit salt for ``tenant`` ("" -> 0)."""
    if not tenant:
        return 0
    return int.from_bytes(hashlib.blake2b(tenant.encode(), digest_size=8).digest(), "little") >> 1


def request_keys(spec: RequestSpec) -> tuple[int, ...]:
    """Chained keys of ``spec``'s full blocks (a trailing partial block is never reused)."""
    n_full = min(len(spec.hash_ids), spec.input_length // spec.block_size) if spec.block_size > 0 else 0
    key = tenant_salt(spec.tenant)
    out = []
    for block_id in spec.hash_ids[:n_full]:
        key = hash((key, block_id))
        out.append(key)
    return tuple(out)
