"""From a run configuration to a simulated cluster: the one path every simulation takes, whether an
``engine=sim`` serving job (:class:`~systems.sim.engine.SimEngine`) or a simulator study.

:class:`SimulatedDeployment` plans the pools of ``cfg.system`` with the shapes in ``cfg.engine`` and builds
their performance models once, checking what only the simulator knows: a known hardware type per pool,
a model that fits its TP x PP group, a known link (and, again, the GPU budget of
:mod:`systems.gpu_budget` for configs that studies build in code). With ``engine.perf_model=fitted`` it
reads ``engine.profile`` once, checks it was measured on this host's CPU model with this model
(``engine.profile_check``), and gives every pool the fitted model; ``engine.kv_link=profile`` is then the
profile's fitted KV transfer. The system's
roles and router were checked with the config (:mod:`systems.topology`). Each simulation then gets a
fresh :class:`~systems.sim.deployment_setup.DeploymentSetup` (new policy objects).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from systems.config import HardwareConfig
from systems.contract import DeploymentConfig
from systems.gpu_budget import check_gpu_budget
from systems.hardware_catalog import load_hardware
from systems.policies import build_policy
from systems.policies.pd import PDScheduler
from systems.sim.deployment_setup import DeploymentSetup, KVPoolSetup, PoolSetup, SimRun
from systems.sim.links import LINKS, LinkSpec, get_link
from systems.sim.perf.base import InstanceShape, PerfModel
from systems.sim.perf.fitted import PROFILE_LINK, profile_link
from systems.sim.perf.profile_file import PerfProfile, check_profile_matches, host_cpu_model, load_profile
from systems.sim.perf.registry import build_perf_model
from systems.sim.simulation import ROLES, Simulation
from systems.sim.stop_rule import StopRule
from systems.topology import canonical_router, topology_of
from vocab.errors import ConfigError
from vocab.records import RequestSpec


@dataclass(frozen=True)
class PoolPlan:
    """A pool before its performance model is built."""

    role: str
    count: int
    shape: InstanceShape
    hardware: HardwareConfig


def plan_pools(cfg: DeploymentConfig) -> list[PoolPlan]:
    """Pools of ``cfg.system`` with the shapes in ``cfg.engine``; ``ConfigError`` for impossible layouts."""
    system, engine = cfg.system, cfg.engine
    counts = {role: system.count(role) for role in ROLES}
    plans = []
    for role in ROLES:
        if not counts[role]:
            continue
        pool_cfg = engine.pool(role)
        try:
            hw = cfg.hardware if pool_cfg.hardware is None else load_hardware(pool_cfg.hardware)
        except ValueError as exc:
            raise ConfigError(f"engine.{role}.hardware: {exc}") from exc
        plans.append(PoolPlan(role, counts[role], InstanceShape(hw.name, pool_cfg.tp, pool_cfg.pp), hw))
    check_gpu_budget(system, engine, cfg.hardware)  # checked with the config too; studies build configs in code
    for p in plans:
        if p.shape.n_gpus > p.hardware.devices_per_node and p.shape.pp == 1:
            raise ConfigError(f"engine.{p.role}.tp: tp={p.shape.tp} spans more than one {p.hardware.name} node "
                              f"({p.hardware.devices_per_node} GPUs); use pp across nodes")
    return plans


# DistServe published one fitted profile per engine it measured (profiler-a100-80g.{distserve,vllm}.json). Its
# simulator times its vLLM backend with the vLLM file (simdistserve/estimators/time_estimator.py,
# engine_type="vllm"), and its artifact served the vLLM baseline with vLLM itself: so does the colocated baseline.
DISTSERVE_PROFILE_OF_SYSTEM = {"vllm_baseline": "vllm"}


def perf_model_params(cfg: DeploymentConfig) -> dict[str, Any]:
    """Constructor parameters of ``cfg``'s performance model that depend on the system: with
    ``engine.perf_model=distserve``, which engine's profile times it (vLLM's for ``vllm_baseline``) and the
    correction ``engine.profile_adjust`` puts on it; with
    ``fitted``, the profile file and whether it must match this host and model."""
    if cfg.engine.perf_model == "distserve":
        adjust = cfg.engine.profile_adjust
        return {"engine": DISTSERVE_PROFILE_OF_SYSTEM.get(cfg.system.name, "distserve"),
                "adjust": None if adjust.identity else (adjust.prefill_scale, adjust.step_ms, adjust.seq_ms)}
    if cfg.engine.perf_model == "fitted":
        return {"profile": cfg.engine.profile, "profile_check": cfg.engine.profile_check}
    return {}


def read_profile(cfg: DeploymentConfig) -> PerfProfile:
    """``engine.profile``, read; ``ConfigError`` starting with the key when it is unset, missing or malformed."""
    if not cfg.engine.profile:
        raise ConfigError("engine.profile: engine.perf_model=fitted needs the path of a profile JSON (written by "
                          "python -m harness experiment=calibrate_cpu); got none")
    try:
        return load_profile(cfg.engine.profile)
    except ConfigError as exc:
        raise ConfigError(f"engine.profile: {exc}") from exc


def load_fitted_profile(cfg: DeploymentConfig) -> Optional[PerfProfile]:
    """With ``engine.perf_model=fitted``, ``engine.profile`` read and matched against this host's CPU model and
    ``cfg.model`` (a ``ConfigError`` naming both sides, or with ``engine.profile_check=false`` a logged
    warning); ``None`` for the other performance models."""
    if cfg.engine.perf_model != "fitted":
        return None
    profile = read_profile(cfg)
    check_profile_matches(profile, cfg.model, host_cpu_model(), cfg.engine.profile_check)
    return profile


def peer_timing_params(cfg: DeploymentConfig) -> dict[str, str]:
    """The peer simulators' timing options of ``cfg`` (``engine.iteration_overhead``,
    ``engine.token_phase_timing``), as :func:`build_perf_model` takes them."""
    return {"iteration_overhead": cfg.engine.iteration_overhead, "token_phase_timing": cfg.engine.token_phase_timing}


def build_perf_models(cfg: DeploymentConfig, plans: list[PoolPlan],
                      profile: Optional[PerfProfile] = None) -> dict[str, PerfModel]:
    """One performance model per pool role; ``ConfigError`` when the model does not fit or is not profiled.
    ``profile``: ``engine.profile`` already read (and matched) by :func:`load_fitted_profile`, for
    ``engine.perf_model=fitted``; read from the file when not given."""
    models = {}
    params = {**perf_model_params(cfg), **peer_timing_params(cfg)}
    if profile is not None and cfg.engine.perf_model == "fitted":
        params["profile"] = profile
    for p in plans:
        try:
            models[p.role] = build_perf_model(cfg.engine.perf_model, cfg.model, p.hardware, p.shape,
                                              profiles_dir=cfg.engine.profiles_dir,
                                              gpu_memory_utilization=cfg.engine.gpu_memory_utilization, **params)
        except ValueError as exc:
            raise ConfigError(f"engine.{p.role} ({cfg.engine.perf_model} model): {exc}") from exc
    return models


def _slo_s(value: Optional[float]) -> Optional[float]:
    return None if value is None else value / 1e3


def kv_link_of(cfg: DeploymentConfig, profile: Optional[PerfProfile] = None) -> LinkSpec:
    """The P->D link ``engine.kv_link`` names: one of :data:`~systems.sim.links.LINKS`, or ``profile``, the
    fitted KV transfer of ``engine.profile`` (``profile``: the file already read; read here when not given)."""
    name = cfg.engine.kv_link
    if name != PROFILE_LINK:
        try:
            return get_link(name)
        except ValueError as exc:
            raise ConfigError(f"engine.kv_link: {exc}; or {PROFILE_LINK} (the KV transfer fitted in "
                              f"engine.profile, with engine.perf_model=fitted)") from exc
    if cfg.engine.perf_model != "fitted":
        raise ConfigError(f"engine.kv_link: {PROFILE_LINK!r} is the fitted KV transfer of engine.profile, which "
                          f"needs engine.perf_model=fitted; got engine.perf_model={cfg.engine.perf_model}")
    profile = profile if profile is not None else read_profile(cfg)
    link = profile_link(profile)
    if link is None:
        raise ConfigError(f"engine.kv_link: profile {profile.label} has no fitted kv_transfer (the calibration "
                          f"measured no KV transfers); choose a link ({', '.join(sorted(LINKS))}) or calibrate "
                          f"with KV transfers")
    return link


def build_setup(cfg: DeploymentConfig, plans: list[PoolPlan], perf: dict[str, PerfModel], seed: int = 0,
                profile: Optional[PerfProfile] = None) -> DeploymentSetup:
    """A fresh ``DeploymentSetup`` (new policy objects) for one simulation; ``profile`` is ``engine.profile``
    already read (for ``engine.kv_link=profile``; read from the file when needed and not given)."""
    system, engine = cfg.system, cfg.engine
    pools = tuple(PoolSetup(p.role, p.count, p.shape, perf[p.role], p.hardware) for p in plans)
    kv_link = kv_link_of(cfg, profile)
    tbt = cfg.slo.tbt_ms if cfg.slo.tbt_ms is not None else cfg.slo.tpot_ms
    topology = topology_of(system.name)
    policy = canonical_router(system.name, system.router)
    router = scheduler = None
    if not topology.disaggregated:
        kwargs: dict[str, Any] = {"seed": seed} if policy == "random" else {}
        router = build_policy(policy, **kwargs)
    else:
        scheduler = PDScheduler(policy, rejection=engine.rejection,
                                ttft_slo_s=_slo_s(cfg.slo.ttft_ms), tbt_slo_s=_slo_s(tbt),
                                kvcache_balancing_threshold=engine.kvcache_balancing_threshold, seed=seed,
                                pick_decode=False,  # the simulator picks decode when the prefill ends
                                decode_load_threshold=engine.decode_load_threshold)
    kv_pool = KVPoolSetup()
    if topology.has_kv_pool and engine.kv_pool.dram_tokens_per_node > 0:
        try:
            remote = get_link(engine.kv_pool.remote_link)
        except ValueError as exc:
            raise ConfigError(f"engine.kv_pool.remote_link: {exc}") from exc
        kv_pool = KVPoolSetup(engine.kv_pool.dram_tokens_per_node, engine.kv_pool.dram_bandwidth_gbps, remote,
                              engine.kv_pool.replication_threshold)
    return DeploymentSetup(
        system=system.name, pools=pools, kv_link=kv_link, router=router, scheduler=scheduler,
        prefix_caching=system.prefix_caching, chunked_prefill=engine.chunked_prefill,
        max_num_batched_tokens=engine.max_num_batched_tokens, max_num_seqs=engine.max_num_seqs,
        layerwise_transfer=engine.layerwise_transfer, kv_handoff=engine.kv_handoff, num_layers=cfg.model.num_layers, kv_pool=kv_pool,
        rejection=engine.rejection, tbt_slo_s=_slo_s(tbt), decode_load_threshold=engine.decode_load_threshold,
        max_model_len=cfg.model.max_model_len,
        mixed_overflow_queue_s=engine.mixed_overflow_queue_s, sample_interval_s=engine.sample_interval_s,
        kv_link_per_gpu=engine.kv_link_per_gpu, whole_prompts=engine.whole_prompts,
        mixed_pool=engine.mixed_pool if topology.has_mixed_pool else "dedicated",  # no mixed pool: nothing to lend to
        mixed_prompt_queue_tokens=engine.mixed_prompt_queue_tokens,
    )


class SimulatedDeployment:
    """A composed config's deployment, checked, with its performance models built once."""

    def __init__(self, cfg: DeploymentConfig) -> None:
        self.cfg = cfg
        self.plans = plan_pools(cfg)
        self.profile = load_fitted_profile(cfg)  # None unless engine.perf_model=fitted
        self.perf = build_perf_models(cfg, self.plans, self.profile)
        kv_link_of(cfg, self.profile)  # an unknown link (or a profile without a KV transfer) fails here, not per run

    @property
    def n_gpus(self) -> int:
        return sum(p.count * p.shape.n_gpus for p in self.plans)

    def setup(self, **changes: Any) -> DeploymentSetup:
        """A fresh set-up (new policy objects), with ``changes`` to its fields."""
        setup = build_setup(self.cfg, self.plans, self.perf, seed=self.cfg.seed, profile=self.profile)
        return dataclasses.replace(setup, **changes) if changes else setup

    def run(self, specs: Sequence[RequestSpec], progress: bool = False, stop: Optional[StopRule] = None,
            **changes: Any) -> tuple[DeploymentSetup, SimRun]:
        """Simulate ``specs`` on an empty cluster (until ``stop`` ends the run: :mod:`systems.sim.stop_rule`);
        returns the set-up used and the run."""
        setup = self.setup(**changes)
        return setup, Simulation(setup).run(specs, progress=progress, stop=stop)

    def describe(self) -> dict[str, Any]:
        return {"engine": "sim", "perf_model": self.cfg.engine.perf_model,
                "pools": [{"role": p.role, "count": p.count, "hardware": p.hardware.name, "tp": p.shape.tp,
                           "pp": p.shape.pp, **self.perf[p.role].describe()} for p in self.plans]}
