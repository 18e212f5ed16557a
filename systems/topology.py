"""System topology: every rule about which deployment a ``(system, engine, router)`` choice describes.

One place holds, for each system, its roles and capabilities (disaggregated, has a cluster-wide KV pool,
has a mixed pool); the routers it accepts, with their aliases; and, per engine, which systems and routers
that engine runs and under what name. :func:`check_deployment` applies all of it while the config is
validated, before any work, and raises :class:`~vocab.errors.ConfigError` naming the key. Code that
needs a capability asks the topology (``topology_of(name).has_kv_pool``) instead of comparing names.

Router names are canonical per kind of system:

* colocated systems route whole requests with :mod:`systems.policies` (``round_robin``, ``random``,
  ``least_outstanding``, ``cache_aware``);
* disaggregated systems place prefills with :class:`systems.policies.pd.PDScheduler` (``round_robin``,
  ``random``, ``load_balancing``, ``local_cache_aware``, ``conductor``).

Aliases map the other kind's names (and the papers' names) onto these, so one ``system.router`` value
works across a sweep of systems: ``least_loaded`` is ``least_outstanding`` for colocated systems and
``load_balancing`` for disaggregated ones; ``global_cache_aware`` (Mooncake's name) is ``conductor``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from systems.policies.pd import PD_POLICY_NAMES
from systems.policies.registry import POLICY_NAMES
from vocab.errors import ConfigError

ENGINES = ("sim", "vllm", "sglang", "endpoint")
ROLES = ("colocated", "prefill", "decode", "mixed")


@dataclass(frozen=True)
class SystemTopology:
    """One deployment design: what it is made of and what it can do."""

    name: str
    disaggregated: bool  # prefill and decode on separate instances, joined by a KV transfer
    has_kv_pool: bool = False  # a cluster-wide KV-cache pool (Mooncake Store / the simulator's DRAM tiers)
    has_mixed_pool: bool = False  # instances that run both phases and take the prompt pool's overflow

    @property
    def router_kind(self) -> str:
        """``disaggregated`` or ``colocated``: which family of router names applies."""
        return "disaggregated" if self.disaggregated else "colocated"

    @property
    def required_roles(self) -> tuple[str, ...]:
        return ("prefill", "decode") if self.disaggregated else ("colocated",)

    @property
    def roles(self) -> tuple[str, ...]:
        """Every role an instance of this system may have."""
        return (*self.required_roles, "mixed") if self.has_mixed_pool else self.required_roles

    @property
    def routers(self) -> tuple[str, ...]:
        """Canonical router names this system accepts (on some engine)."""
        names = ROUTERS[self.router_kind]
        return tuple(n for n in names if self.has_kv_pool or n not in NEEDS_KV_POOL)


SYSTEMS: Mapping[str, SystemTopology] = MappingProxyType({
    "vllm_baseline": SystemTopology("vllm_baseline", disaggregated=False),
    "mooncake": SystemTopology("mooncake", disaggregated=True, has_kv_pool=True),
    "distserve": SystemTopology("distserve", disaggregated=True),
    "splitwise": SystemTopology("splitwise", disaggregated=True, has_mixed_pool=True),
})
SYSTEM_NAMES = tuple(SYSTEMS)

ROUTERS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "colocated": tuple(POLICY_NAMES),
    "disaggregated": tuple(PD_POLICY_NAMES),
})
ROUTER_ALIASES: Mapping[str, Mapping[str, str]] = MappingProxyType({
    "colocated": MappingProxyType({"least_loaded": "least_outstanding", "load_balancing": "least_outstanding",
                                   "local_cache_aware": "cache_aware"}),
    "disaggregated": MappingProxyType({"least_loaded": "load_balancing", "least_outstanding": "load_balancing",
                                       "cache_aware": "local_cache_aware", "global_cache_aware": "conductor"}),
})
# Routers that only make sense with a cluster-wide KV pool, and why.
NEEDS_KV_POOL: Mapping[str, str] = MappingProxyType({
    "conductor": "the Conductor weighs each prefill instance's own cache against the cluster-wide KV pool, "
                 "which only system=mooncake has; use local_cache_aware",
})

# Systems an engine cannot run, and why.
ENGINE_REFUSES_SYSTEM: Mapping[tuple[str, str], str] = MappingProxyType({
    ("sglang", "splitwise"): "engine=sglang has no mixed pool and no per-role hardware; run system=splitwise on "
                             "engine=sim or engine=vllm",
})
# engine=sglang runs sglang_router; the suite's canonical routers map to its policies, some approximately.
SGLANG_ROUTER_POLICY: Mapping[str, str] = MappingProxyType({
    "round_robin": "round_robin", "random": "random", "cache_aware": "cache_aware",
    "local_cache_aware": "cache_aware", "least_outstanding": "power_of_two", "load_balancing": "power_of_two",
    "prefix_match": "cache_aware", "conductor": "cache_aware",
})
SGLANG_APPROXIMATIONS: Mapping[str, str] = MappingProxyType({
    "least_outstanding": "the lighter of two sampled workers, not the least loaded of all",
    "load_balancing": "the lighter of two sampled workers, not the shortest estimated queue",
    "conductor": "prefix locality plus load balance, not Mooncake's Conductor (no pool-aware TTFT estimate)",
    "prefix_match": "prefix locality plus load balance, not the longest local prefix alone",
})


def topology_of(system: str) -> SystemTopology:
    """The topology of ``system``; ``ConfigError`` naming ``system.name`` otherwise."""
    try:
        return SYSTEMS[system]
    except KeyError:
        raise ConfigError(f"system.name: expected one of {', '.join(SYSTEM_NAMES)}, got {system!r}") from None


def canonical_router(system: str, router: str) -> str:
    """The canonical name of ``router`` for ``system`` (aliases resolved); ``ConfigError`` naming
    ``system.router`` with the accepted names when the system does not take it."""
    topo = topology_of(system)
    name = ROUTER_ALIASES[topo.router_kind].get(router, router)
    if name in NEEDS_KV_POOL and not topo.has_kv_pool:
        raise ConfigError(f"system.router={router}: not for system={system}: {NEEDS_KV_POOL[name]}")
    if name not in topo.routers:
        aliases = ", ".join(f"{a}={c}" for a, c in ROUTER_ALIASES[topo.router_kind].items() if c in topo.routers)
        raise ConfigError(f"system.router={router}: system={system} ({topo.router_kind}) takes "
                          f"{', '.join(topo.routers)} (aliases: {aliases})")
    return name


def engine_router(system: str, engine: str, router: str) -> str:
    """The router policy ``engine`` runs for ``system.router=router``: the canonical name, or for
    ``engine=sglang`` the sglang_router policy it maps to (see :data:`SGLANG_APPROXIMATIONS`)."""
    name = canonical_router(system, router)
    return SGLANG_ROUTER_POLICY[name] if engine == "sglang" else name


def check_deployment(system: Any, engine: str) -> SystemTopology:
    """Check a ``SystemConfig`` against its topology and ``engine``: instance counts per role, the router,
    and whether the engine runs the system. Returns the topology; raises ``ConfigError`` naming the key."""
    topo = topology_of(system.name)
    if engine not in ENGINES:
        raise ConfigError(f"engine.name: expected one of {', '.join(ENGINES)}, got {engine!r}")
    counts = {role: int(getattr(system, f"{role}_instances")) for role in ROLES}
    for role, n in counts.items():
        if n < 0:
            raise ConfigError(f"system.{role}_instances: must be >= 0, got {n}")
    for role in topo.required_roles:
        if counts[role] < 1:
            need = " and ".join(f"{r}_instances >= 1" for r in topo.required_roles)
            raise ConfigError(f"system.{role}_instances: system={topo.name} needs {need}, got {counts[role]}")
    for role in ROLES:
        if counts[role] and role not in topo.roles:
            why = ("only a system with a mixed pool (splitwise) has mixed instances" if role == "mixed"
                   else f"system={topo.name} has no {role} instances (its roles: {', '.join(topo.roles)})")
            raise ConfigError(f"system.{role}_instances: must be 0 for system={topo.name}, got {counts[role]}: {why}")
    refusal = ENGINE_REFUSES_SYSTEM.get((engine, topo.name))
    if refusal:
        raise ConfigError(f"engine={engine}: cannot run system={topo.name}: {refusal}")
    canonical_router(topo.name, system.router)
    return topo
