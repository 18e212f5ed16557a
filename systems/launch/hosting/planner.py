"""Choosing a node for every server of a deployment before anything starts (pure; no Ray needed).

:func:`plan` takes the servers (name, role, resources, labels, spread) and the cluster's nodes as the
hosting layer sees them (:class:`NodeView`), and assigns each server, in order, to the alive node that
has its labels and enough resources left, and that does not already hold a server of its role when the
role is spread; among several, the one holding the fewest servers so far (then the first listed). A
deployment that cannot be placed raises :class:`HostingError` naming, for every server that does not
fit, what it needs and what the closest node lacks, so nothing is started half-way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from systems.contract import DeploymentError


class HostingError(DeploymentError):
    """The deployment's servers do not fit the cluster's nodes (nothing was started)."""


@dataclass(frozen=True)
class ServerRequest:
    """One server to place: its name, its role and what its node must offer."""

    name: str
    role: str
    resources: Mapping[str, float] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    spread: bool = False


@dataclass(frozen=True)
class NodeView:
    """A node: its id, its address, its total resources and its labels."""

    node_id: str
    address: str
    resources: Mapping[str, float]
    labels: Mapping[str, str] = field(default_factory=dict)
    alive: bool = True

    @property
    def short(self) -> str:
        name = self.labels.get("disagg_node") or ("head" if "node:__internal_head__" in self.resources else "")
        return f"{name} ({self.node_id[:8]})" if name else self.node_id[:12]


HIDDEN_RESOURCES = ("memory", "object_store_memory")  # Ray's own, shown only when a rule asks for them


def _shown(resources: Mapping[str, float]) -> dict[str, float]:
    return {k: v for k, v in resources.items() if k not in HIDDEN_RESOURCES and not k.startswith("node:")}


def _format(amounts: Mapping[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(amounts.items())) + "}" if amounts else "{}"


def _shortfall(request: ServerRequest, node: NodeView, left: Mapping[str, float]) -> list[str]:
    missing = [f"label {k}={v}" + (f" (it has {k}={node.labels[k]})" if k in node.labels else "")
               for k, v in request.labels.items() if node.labels.get(k) != v]
    for name, amount in request.resources.items():
        have = left.get(name, 0.0)
        if have + 1e-9 < amount:
            total = node.resources.get(name, 0.0)
            missing.append(f"{name} {amount:g} (it has {have:g} left of {total:g})")
    return missing


def plan(requests: Sequence[ServerRequest], nodes: Sequence[NodeView]) -> dict[str, NodeView]:
    """Server name -> node, or ``HostingError`` listing every server that does not fit and why."""
    names = [r.name for r in requests]
    if len(set(names)) != len(names):
        raise ValueError(f"server names must be unique, got {names}")
    alive = [n for n in nodes if n.alive]
    left = {n.node_id: dict(n.resources) for n in alive}
    count = {n.node_id: 0 for n in alive}
    roles_on: dict[str, set[str]] = {n.node_id: set() for n in alive}
    chosen: dict[str, NodeView] = {}
    problems: list[str] = []
    for request in requests:
        fits = [n for n in alive if not _shortfall(request, n, left[n.node_id])
                and not (request.spread and request.role in roles_on[n.node_id])]
        if not fits:
            problems.append(_why_not(request, alive, left, roles_on))
            continue
        node = min(fits, key=lambda n: count[n.node_id])
        chosen[request.name] = node
        count[node.node_id] += 1
        roles_on[node.node_id].add(request.role)
        for name, amount in request.resources.items():
            left[node.node_id][name] = left[node.node_id].get(name, 0.0) - amount
    if problems:
        inventory = "; ".join(f"{n.short} at {n.address}: {_format(_shown(n.resources))}"
                              + (f" labels {_format_labels(n.labels)}" if _format_labels(n.labels) else "")
                              for n in alive) or "none alive"
        raise HostingError("the deployment does not fit the cluster; nothing was started:\n  "
                             + "\n  ".join(problems) + f"\nnodes: {inventory}")
    return chosen


def _format_labels(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if not k.startswith("ray.io/"))


def _why_not(request: ServerRequest, alive: Sequence[NodeView], left: Mapping[str, Mapping[str, float]],
             roles_on: Mapping[str, set[str]]) -> str:
    wants = f"{request.name} ({request.role}) needs {_format(request.resources)}"
    if request.labels:
        wants += f" on a node labelled {_format_labels(request.labels)}"
    if request.spread:
        wants += f", at most one {request.role} per node"
    if not alive:
        return f"{wants}: the cluster has no alive node"
    reasons = []
    for node in alive:
        missing = _shortfall(request, node, left[node.node_id])
        if request.spread and request.role in roles_on[node.node_id]:
            missing.append(f"already holds a {request.role}")
        reasons.append(f"{node.short} lacks {', '.join(missing)}")
    return f"{wants}: " + "; ".join(reasons)
