"""How many KV blocks a backend's cache holds: the bound of the router's per-backend block index.

A block index that never forgets grows with every distinct prompt and, worse, keeps claiming blocks the
engine evicted long ago. An engine cannot hold more than its KV capacity, so the router bounds each
backend's index there (least recently recorded evicted first). The capacity comes, in this order, from

1. the router's command line (``--capacity-blocks N``);
2. the backends themselves (``--capacity-blocks auto``, the default): vLLM's ``/metrics`` carries
   ``vllm:cache_config_info{num_gpu_blocks="...", block_size="..."}``; the router takes the smallest
   ``num_gpu_blocks * block_size`` over its backends, in its own ``--block-size`` blocks;
3. else :data:`DEFAULT_CAPACITY_TOKENS` tokens (a warning says so).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Optional

import aiohttp

from systems.launch.prometheus import MetricsParseError, parse_metrics

__all__ = ["DEFAULT_CAPACITY_TOKENS", "capacity_tokens_from_metrics", "default_capacity_blocks",
           "learn_capacity_blocks"]

logger = logging.getLogger(__name__)

DEFAULT_CAPACITY_TOKENS = 1 << 20  # per backend, when neither the command line nor the backends say
CACHE_CONFIG_METRIC = "vllm:cache_config_info"


def default_capacity_blocks(block_size: int) -> int:
    """:data:`DEFAULT_CAPACITY_TOKENS` in blocks of ``block_size`` tokens."""
    return max(1, DEFAULT_CAPACITY_TOKENS // block_size)


def capacity_tokens_from_metrics(text: str) -> Optional[int]:
    """``num_gpu_blocks * block_size`` from a vLLM ``/metrics`` page (None when it does not say)."""
    try:
        samples = parse_metrics(text)
    except MetricsParseError:
        return None
    for sample in samples:
        if sample.name != CACHE_CONFIG_METRIC:
            continue
        blocks, size = sample.labels.get("num_gpu_blocks", ""), sample.labels.get("block_size", "")
        if blocks.isdigit() and size.isdigit() and int(blocks) > 0 and int(size) > 0:
            return int(blocks) * int(size)
    return None


async def learn_capacity_blocks(urls: Sequence[str], block_size: int, timeout_s: float = 5.0) -> Optional[int]:
    """The smallest KV capacity of the backends at ``urls``, in ``block_size``-token blocks (None when any
    backend does not answer or does not say)."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as session:

        async def one(url: str) -> Optional[int]:
            try:
                async with session.get(f"{url}/metrics") as resp:
                    if resp.status != 200:
                        return None
                    return capacity_tokens_from_metrics(await resp.text())
            except (aiohttp.ClientError, TimeoutError) as exc:
                logger.info("KV capacity of %s unknown: %s: %s", url, type(exc).__name__, exc)
                return None

        tokens = await asyncio.gather(*(one(u) for u in urls))
    if not tokens or any(t is None for t in tokens):
        return None
    return max(1, min(t for t in tokens if t is not None) // block_size)
