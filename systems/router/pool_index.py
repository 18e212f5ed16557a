"""What the cluster-wide KV pool holds, asked of Mooncake Store directly.

vLLM's ``MooncakeStoreConnector`` stores one object per KV block under
``<model folder name>@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@<block hash hex>``, where the block hash is
vLLM's chained prefix-cache hash (sha256 over ``(parent hash, block token ids, extra keys)``, seeded
with vLLM's ``NONE_HASH``; the first block's extra keys carry the request's ``cache_salt``).
:func:`vllm_block_hashes` computes those hashes with vLLM's own functions, so the keys the router asks
about are byte-identical to the ones the engines wrote; :class:`PoolIndex` asks the master with one
``batch_is_exist`` call and returns the longest leading run of blocks present. Its store client's transfer
engine names itself by ``local_hostname``: the router's own address (its ``--host``, 127.0.0.1 by default).

The router imports vLLM only when a pool is configured (``system=mooncake``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Optional

from systems.launch.ports import LOOPBACK, check_host

logger = logging.getLogger(__name__)

DEFAULT_HASH_ALGO = "sha256"  # vLLM's --prefix-caching-hash-algo default


def store_key_prefix(model_folder_name: str, cache_prefix: str = "") -> str:
    """The key prefix vLLM's store connector uses for TP/PP rank 0 of KV-cache group 0."""
    head = f"{cache_prefix}@" if cache_prefix else ""
    return f"{head}{model_folder_name}@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0"


class VllmBlockHasher:
    """vLLM's chained block hashes of a token prompt (full blocks only)."""

    def __init__(self, block_size: int, algo: str = DEFAULT_HASH_ALGO) -> None:
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core import kv_cache_utils

        self.block_size = block_size
        self._hash_fn = get_hash_fn_by_name(algo)
        kv_cache_utils.init_none_hash(self._hash_fn)
        self._hash_block = kv_cache_utils.hash_block_tokens

    def hashes(self, token_ids: Sequence[int], cache_salt: str = "") -> list[bytes]:
        out: list[bytes] = []
        parent: Optional[bytes] = None
        bs = self.block_size
        for b in range(len(token_ids) // bs):
            extra = (("cache_salt", cache_salt),) if (b == 0 and cache_salt) else None
            parent = self._hash_block(self._hash_fn, parent, token_ids[b * bs:(b + 1) * bs], extra)
            out.append(parent)
        return out


class PoolIndex:
    """Existence checks against Mooncake Store for the blocks of a prompt."""

    def __init__(self, master: str, key_prefix: str, block_size: int, protocol: str = "tcp",
                 store: Any = None, hasher: Any = None, local_hostname: str = LOOPBACK) -> None:
        """``local_hostname``: the address of this node, the first argument of the store client's
        ``setup`` (``ValueError`` when it is not an address or a host name)."""
        check_host(local_hostname, "pool index local_hostname")
        self.key_prefix = key_prefix
        self.block_size = block_size
        self.hasher = hasher if hasher is not None else VllmBlockHasher(block_size)
        if store is None:
            from mooncake.store import MooncakeDistributedStore

            store = MooncakeDistributedStore()
            rc = store.setup(local_hostname, "P2PHANDSHAKE", 0, 16 << 20, protocol, "", master)
            if rc != 0:
                raise RuntimeError(f"router: cannot join mooncake_master at {master} (setup returned {rc})")
        self.store = store
        self.queries = 0
        self.errors = 0

    def keys(self, token_ids: Sequence[int], cache_salt: str = "") -> list[str]:
        return [f"{self.key_prefix}@{h.hex()}" for h in self.hasher.hashes(token_ids, cache_salt)]

    def cached_prefix_tokens(self, token_ids: Sequence[int], cache_salt: str = "") -> int:
        """Leading prompt tokens whose blocks are all in the pool (0 when the master does not answer)."""
        keys = self.keys(token_ids, cache_salt)
        if not keys:
            return 0
        self.queries += 1
        try:
            present = self.store.batch_is_exist(keys)
        except Exception as exc:  # the master is down or restarting: treat the pool as empty
            self.errors += 1
            logger.warning("pool existence check failed: %s", exc)
            return 0
        n = 0
        for flag in present:
            if flag != 1:  # 1: present; 0: absent; negative: error
                if flag < 0:
                    self.errors += 1
                break
            n += 1
        return n * self.block_size
