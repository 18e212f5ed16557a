"""Build a colocated routing policy from its canonical name (the router's ``--policy``). Which names a
system accepts, and the aliases configs may use, are :mod:`systems.topology`'s."""

from __future__ import annotations

import inspect
from typing import Any

from systems.policies.base import RoutingPolicy
from systems.policies.cache_aware import CacheAwarePolicy
from systems.policies.simple import LeastOutstandingPolicy, RandomPolicy, RoundRobinPolicy

__all__ = ["POLICY_NAMES", "build_policy", "policy_class", "policy_parameters"]

_POLICIES: dict[str, type[RoutingPolicy]] = {
    cls.name: cls for cls in (RandomPolicy, RoundRobinPolicy, LeastOutstandingPolicy, CacheAwarePolicy)
}
POLICY_NAMES: tuple[str, ...] = tuple(sorted(_POLICIES))


def policy_class(name: str) -> type[RoutingPolicy]:
    """The policy class registered under ``name``; ``ValueError`` listing the names otherwise."""
    try:
        return _POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown routing policy {name!r}; known: {', '.join(POLICY_NAMES)}") from None


def policy_parameters(name: str) -> tuple[str, ...]:
    """Keyword arguments the policy ``name`` accepts."""
    params = inspect.signature(policy_class(name).__init__).parameters
    return tuple(p for p in params if p != "self")


def build_policy(name: str, **kwargs: Any) -> RoutingPolicy:
    """A new policy ``name`` built with ``kwargs``; an argument the policy does not take is a ``ValueError``."""
    cls = policy_class(name)
    accepted = policy_parameters(name)
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        raise ValueError(
            f"routing policy {name!r} does not take {', '.join(unknown)}; "
            f"it takes: {', '.join(accepted) if accepted else 'no arguments'}"
        )
    return cls(**kwargs)
