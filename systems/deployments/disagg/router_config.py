"""The JSON the disaggregating router reads (:class:`systems.router.pd_app.RouterConfig`), built from the
run's config and what the deployment started: the instances by role, the bootstrap registry, the pool
and the router's starting cost estimates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Optional

from systems.contract import DeploymentConfig


@dataclass(frozen=True)
class RoutedInstance:
    """One vLLM instance as the router sees it."""

    name: str
    role: str  # prefill | decode | mixed
    url: str
    bootstrap: str = ""  # prefill only: host:port of its entry in the bootstrap registry


def _ms_to_s(value: Optional[float]) -> Optional[float]:
    return None if value is None else float(value) / 1e3


def router_config(cfg: DeploymentConfig, instances: Sequence[RoutedInstance], *, policy: str, block_size: int,
                  pool_master: str, pool_key_prefix: str, pool_protocol: str, request_log: str,
                  kv_events_port: int) -> dict[str, Any]:
    """The router's config: ``kv_events_port`` 0 means the prefill instances keep no prefix cache (the
    router then learns nothing from KV-cache events); ``pool_master`` "" means no pool."""
    engine = cfg.engine
    by_role: dict[str, list[dict[str, str]]] = {"prefill": [], "decode": [], "mixed": []}
    for inst in instances:
        entry = {"name": inst.name, "url": inst.url}
        if inst.role == "prefill":
            entry["bootstrap"] = f"http://{inst.bootstrap}"
        by_role[inst.role].append(entry)
    kv_bytes = int(cfg.model.kv_bytes_per_token)
    kv_tokens = int(engine.cpu_kvcache_space_gib * (1 << 30) // max(kv_bytes, 1))  # one instance's KV cache
    estimates: Mapping[str, Any] = asdict(engine.router_estimates)
    return {**by_role, "policy": policy, "rejection": engine.rejection,
            "decode_load_threshold": engine.decode_load_threshold,
            "ttft_slo_s": _ms_to_s(cfg.slo.ttft_ms), "tbt_slo_s": _ms_to_s(cfg.slo.tpot_ms),
            "kvcache_balancing_threshold": engine.kvcache_balancing_threshold, "seed": cfg.seed,
            "block_size": block_size, "mixed_overflow_outstanding": engine.mixed_overflow_outstanding,
            "pool_master": pool_master, "pool_key_prefix": pool_key_prefix, "pool_protocol": pool_protocol,
            "pool_query_timeout_s": engine.kv_pool.query_timeout_s,
            "estimates": {**estimates, "kv_bytes_per_token": kv_bytes, "decode_kv_capacity_tokens": kv_tokens,
                          "local_capacity_tokens": kv_tokens},
            "request_log": request_log, "local_cache": bool(kv_events_port), "kv_events_port": kv_events_port}
