"""Per-role hosting rules: what a node must offer to host a server of one role.

``engine.hosting_rules.<role>`` holds, for each role of :data:`ROLES`, the Ray resources one server of
that role takes on its node (``{"GPU": 8}``, or a custom resource standing for a host kind such as
``{"prefill": 1}``), the node labels it needs (``{"hw": "h100"}`` for Splitwise's prompt pool), and
``spread`` (no two servers of the role on one node). :func:`server_demand` adds what the deployment
itself knows: a GPU instance takes its tensor-parallel degree in GPUs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vocab.errors import ConfigError

INSTANCE_ROLES = ("colocated", "prefill", "decode", "mixed")  # the vLLM servers
HELPER_ROLES = ("router", "kv_bootstrap", "mooncake_master", "pool_node")  # the suite's own servers
ROLES = INSTANCE_ROLES + HELPER_ROLES
_LABEL_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.\-/]*[A-Za-z0-9])?$")


@dataclass
class HostingRule:
    """What the node of every server of one role must offer (``engine.hosting_rules.<role>``)."""

    resources: dict[str, float] = field(default_factory=dict)  # Ray resources one server takes there
    labels: dict[str, str] = field(default_factory=dict)  # node labels it needs, e.g. {hw: h100}
    spread: bool = False  # at most one server of this role per node


@dataclass
class HostingRules:
    """``engine.hosting_rules``: one rule per role (an empty rule: any node, nothing reserved)."""

    colocated: HostingRule = field(default_factory=HostingRule)  # system=vllm_baseline's instances
    prefill: HostingRule = field(default_factory=HostingRule)
    decode: HostingRule = field(default_factory=HostingRule)
    mixed: HostingRule = field(default_factory=HostingRule)  # Splitwise's mixed pool
    router: HostingRule = field(default_factory=HostingRule)
    kv_bootstrap: HostingRule = field(default_factory=HostingRule)
    mooncake_master: HostingRule = field(default_factory=HostingRule)
    pool_node: HostingRule = field(default_factory=HostingRule)


def check_rule(role: str, rule: Any) -> HostingRule:
    """``rule`` (a mapping or a ``HostingRule``) checked; ``ConfigError`` naming the key otherwise."""
    where = f"engine.hosting_rules.{role}"
    if role not in ROLES:
        raise ConfigError(f"engine.hosting_rules: unknown role {role!r}; expected one of {', '.join(ROLES)}")
    get = rule.get if isinstance(rule, Mapping) else (lambda key, default=None: getattr(rule, key, default))
    resources = dict(get("resources", None) or {})
    labels = dict(get("labels", None) or {})
    for name, amount in resources.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}.resources: resource names must be non-empty strings, got {name!r}")
        if isinstance(amount, bool) or not isinstance(amount, int | float) or not math.isfinite(amount) or amount < 0:
            raise ConfigError(f"{where}.resources.{name}: expected a number >= 0, got {amount!r}")
    for key, value in labels.items():
        if not isinstance(key, str) or not _LABEL_RE.match(key):
            raise ConfigError(f"{where}.labels: {key!r} is not a valid label key (letters, digits, '_.-/')")
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise ConfigError(f"{where}.labels.{key}: expected a string, got {value!r}")
    spread = get("spread", False)
    if not isinstance(spread, bool):
        raise ConfigError(f"{where}.spread: expected true or false, got {spread!r}")
    return HostingRule(resources={k: float(v) for k, v in resources.items()},
                         labels={k: str(v) for k, v in labels.items()}, spread=spread)


def check_rules(rules: Mapping[str, Any] | HostingRules | None) -> dict[str, HostingRule]:
    """Every role's rule (an empty one where ``rules`` has none)."""
    if isinstance(rules, HostingRules):
        rules = {role: getattr(rules, role) for role in ROLES}
    rules = dict(rules or {})
    unknown = sorted(set(rules) - set(ROLES))
    if unknown:
        raise ConfigError(f"engine.hosting_rules: unknown role(s) {', '.join(unknown)}; expected roles among "
                          f"{', '.join(ROLES)}")
    return {role: check_rule(role, rules.get(role) or {}) for role in ROLES}


def server_demand(rule: HostingRule, gpus: int = 0) -> dict[str, float]:
    """The resources one server takes: its rule's, plus ``gpus`` GPUs (a GPU instance's TP degree) unless the
    rule names GPUs itself."""
    demand = dict(rule.resources)
    if gpus and "GPU" not in demand:
        demand["GPU"] = float(gpus)
    return {k: v for k, v in demand.items() if v > 0}
