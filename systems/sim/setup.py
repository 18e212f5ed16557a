"""From a run configuration to a :class:`~systems.sim.cluster.ClusterSetup`, checking before anything
runs that the deployment is possible: the system's roles, a known hardware type per pool, a model that
fits its TP x PP group, a GPU budget that covers every pool, a known link and routing policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from harness.config import ConfigError, HardwareConfig
from systems.policies import build_policy
from systems.policies.pd import PD_POLICY_NAMES, PDScheduler
from systems.sim.cluster import ROLES, ClusterSetup, KVPoolSetup, PoolSetup
from systems.sim.hardware_catalog import load_hardware
from systems.sim.links import get_link
from systems.sim.perf.base import InstanceShape, PerfModel
from systems.sim.perf.registry import build_perf_model

PD_ALIASES = {"least_loaded": "load_balancing", "least_outstanding": "load_balancing",
              "global_cache_aware": "conductor", "cache_aware": "local_cache_aware"}


@dataclass(frozen=True)
class PoolPlan:
    """A pool before its performance model is built."""

    role: str
    count: int
    shape: InstanceShape
    hardware: HardwareConfig


def plan_pools(cfg: Any) -> list[PoolPlan]:
    """Pools of ``cfg.system`` with the shapes in ``cfg.engine``; ``ConfigError`` for impossible layouts."""
    system, engine = cfg.system, cfg.engine
    counts = {"colocated": system.colocated_instances, "prefill": system.prefill_instances,
              "decode": system.decode_instances, "mixed": system.mixed_instances}
    if system.name == "vllm_baseline":
        if counts["prefill"] or counts["decode"] or counts["mixed"] or not counts["colocated"]:
            raise ConfigError("system=vllm_baseline: needs colocated_instances > 0 and no prefill, decode or mixed instances")
    else:
        if not counts["prefill"] or not counts["decode"]:
            raise ConfigError(f"system={system.name}: needs prefill_instances > 0 and decode_instances > 0, "
                              f"got {counts['prefill']} and {counts['decode']}")
        if counts["colocated"]:
            raise ConfigError(f"system={system.name}: colocated_instances must be 0 (got {counts['colocated']})")
        if counts["mixed"] and system.name != "splitwise":
            raise ConfigError(f"system.mixed_instances: only Splitwise has a mixed pool (system={system.name})")
    plans = []
    for role in ROLES:
        if not counts[role]:
            continue
        pool_cfg = getattr(engine, role)
        try:
            hw = cfg.hardware if pool_cfg.hardware is None else load_hardware(pool_cfg.hardware)
        except ValueError as exc:
            raise ConfigError(f"engine.{role}.hardware: {exc}") from exc
        plans.append(PoolPlan(role, counts[role], InstanceShape(hw.name, pool_cfg.tp, pool_cfg.pp), hw))
    n_gpus = sum(p.count * p.shape.n_gpus for p in plans)
    budget = system.gpu_budget
    if budget is not None and n_gpus > budget:
        layout = ", ".join(f"{p.count} {p.role} x tp{p.shape.tp}pp{p.shape.pp}" for p in plans)
        raise ConfigError(f"system.gpu_budget: the deployment needs {n_gpus} GPUs ({layout}) but the budget is {budget}")
    for p in plans:
        if p.shape.n_gpus > p.hardware.devices_per_node and p.shape.pp == 1:
            raise ConfigError(f"engine.{p.role}.tp: tp={p.shape.tp} spans more than one {p.hardware.name} node "
                              f"({p.hardware.devices_per_node} GPUs); use pp across nodes")
    return plans


def build_perf_models(cfg: Any, plans: list[PoolPlan]) -> dict[str, PerfModel]:
    """One performance model per pool role; ``ConfigError`` when the model does not fit or is not profiled."""
    models = {}
    for p in plans:
        try:
            models[p.role] = build_perf_model(cfg.engine.perf_model, cfg.model, p.hardware, p.shape,
                                              profiles_dir=cfg.engine.profiles_dir,
                                              gpu_memory_utilization=cfg.engine.gpu_memory_utilization)
        except ValueError as exc:
            raise ConfigError(f"engine.{p.role} ({cfg.engine.perf_model} model): {exc}") from exc
    return models


def _slo_s(value: Optional[float]) -> Optional[float]:
    return None if value is None else value / 1e3


def build_setup(cfg: Any, plans: list[PoolPlan], perf: dict[str, PerfModel], seed: int = 0) -> ClusterSetup:
    """A fresh ``ClusterSetup`` (new policy objects) for one simulation."""
    system, engine = cfg.system, cfg.engine
    pools = tuple(PoolSetup(p.role, p.count, p.shape, perf[p.role], p.hardware) for p in plans)
    try:
        kv_link = get_link(engine.kv_link)
    except ValueError as exc:
        raise ConfigError(f"engine.kv_link: {exc}") from exc
    tbt = cfg.slo.tbt_ms if cfg.slo.tbt_ms is not None else cfg.slo.tpot_ms
    router = scheduler = None
    if system.name == "vllm_baseline":
        try:
            kwargs: dict[str, Any] = {"seed": seed} if system.router == "random" else {}
            router = build_policy(system.router, **kwargs)
        except ValueError as exc:
            raise ConfigError(f"system.router: {exc}") from exc
    else:
        name = PD_ALIASES.get(system.router, system.router)
        if name not in PD_POLICY_NAMES:
            raise ConfigError(f"system.router: {system.router!r} is not a disaggregation policy; expected one of "
                              f"{', '.join(PD_POLICY_NAMES)} (aliases: {', '.join(PD_ALIASES)})")
        scheduler = PDScheduler(name, rejection=engine.rejection,
                                ttft_slo_s=_slo_s(cfg.slo.ttft_ms), tbt_slo_s=_slo_s(tbt),
                                kvcache_balancing_threshold=engine.kvcache_balancing_threshold, seed=seed,
                                pick_decode=False)  # the simulator picks decode when the prefill ends
    kv_pool = KVPoolSetup()
    if system.name == "mooncake" and engine.kv_pool.dram_tokens_per_node > 0:
        try:
            remote = get_link(engine.kv_pool.remote_link)
        except ValueError as exc:
            raise ConfigError(f"engine.kv_pool.remote_link: {exc}") from exc
        kv_pool = KVPoolSetup(engine.kv_pool.dram_tokens_per_node, engine.kv_pool.dram_bandwidth_gbps, remote,
                              engine.kv_pool.replication_threshold)
    return ClusterSetup(
        system=system.name, pools=pools, kv_link=kv_link, router=router, scheduler=scheduler,
        prefix_caching=system.prefix_caching, chunked_prefill=engine.chunked_prefill,
        max_num_batched_tokens=engine.max_num_batched_tokens, max_num_seqs=engine.max_num_seqs,
        layerwise_transfer=engine.layerwise_transfer, num_layers=cfg.model.num_layers, kv_pool=kv_pool,
        rejection=engine.rejection, tbt_slo_s=_slo_s(tbt), max_model_len=cfg.model.max_model_len,
        mixed_overflow_queue_s=engine.mixed_overflow_queue_s, sample_interval_s=engine.sample_interval_s,
    )
