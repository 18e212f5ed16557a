"""KV-cache models: trace-driven prefix-cache replay (Mooncake's cache study)."""

from systems.kvcache.prefix_cache_replay import (
    EvictionPolicy,
    GlobalLocalResult,
    ReplayRouting,
    flatten_blocks,
    hit_rates,
    precompile,
    replay_global_vs_local,
    replay_prefix_hits,
    replay_sweep,
)

__all__ = [
    "EvictionPolicy",
    "GlobalLocalResult",
    "ReplayRouting",
    "flatten_blocks",
    "hit_rates",
    "precompile",
    "replay_global_vs_local",
    "replay_prefix_hits",
    "replay_sweep",
]
