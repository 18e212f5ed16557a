"""What a budget buys in the Splitwise provisioning study: each machine's price and power, the designs
(which hardware each pool runs on), and every Pareto-maximal split of machines between the pools."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np

from harness.config import Config
from systems.engine_config import SimEngineConfig
from systems.hardware_catalog import device_cost
from systems.topology import topology_of
from vocab.errors import ConfigError

PROVISIONED_SYSTEMS = ("vllm_baseline", "splitwise")  # Splitwise's designs and its colocated baselines
FIT_TOLERANCE = 1e-9  # relative slack when comparing a total with the budget (7 x 3.2 kW == 4 x 5.6 kW)



@dataclass(frozen=True)
class MachineType:
    """One machine (a DGX) of one hardware type: its price and power."""

    hardware: str
    gpus: int
    cost_usd_hr: float
    power_kw: float

    def resource(self, kind: str) -> float:
        """The machine's cost ($/hr) or power (kW)."""
        return self.cost_usd_hr if kind == "cost" else self.power_kw


def machine_type(hardware: str, gpus: int = 8, power_w: Optional[Mapping[str, float]] = None) -> MachineType:
    """``gpus`` x the hardware YAML's price and power (``power_w`` replaces a machine's power, in W)."""
    cost = device_cost(hardware, gpus)
    if cost.usd_per_hour is None or cost.watts is None:
        raise ConfigError(f"hardware {hardware}: needs price_per_hour_usd and power_w for a provisioning study")
    watts = (power_w or {}).get(hardware, cost.watts)
    return MachineType(hardware, gpus, cost.usd_per_hour, watts / 1e3)


@dataclass(frozen=True)
class Design:
    """A composed design: its system, the hardware of each pool, and which pool counts are enumerated."""

    label: str
    overrides: tuple[str, ...]
    system: str
    hardware: Mapping[str, str]  # role -> hardware name, for every role the design has
    fixed: Mapping[str, int]  # roles whose count the design sets (the mixed pool)

    @property
    def free_roles(self) -> tuple[str, ...]:
        """The pools whose machine counts the study enumerates."""
        return topology_of(self.system).required_roles


def design_from_config(label: str, overrides: Sequence[str], cfg: Config, gpus_per_machine: int) -> Design:
    """Read a composed variant as a design; ``ConfigError`` unless every pool is one machine per instance."""
    system = cfg.system.name
    if system not in PROVISIONED_SYSTEMS:
        raise ConfigError(f"study.variants.{label}: splitwise_provisioning compares "
                          f"{' and '.join(f'system={s}' for s in PROVISIONED_SYSTEMS)} designs, got system={system}")
    if not isinstance(cfg.engine, SimEngineConfig):
        raise ConfigError(f"study.variants.{label}: needs engine=sim, got engine={cfg.engine.name}")
    topology = topology_of(system)
    roles = list(topology.required_roles)
    fixed = {}
    if topology.has_mixed_pool and cfg.system.mixed_instances:
        roles.append("mixed")
        fixed["mixed"] = int(cfg.system.mixed_instances)
    hardware = {}
    for role in roles:
        pool = cfg.engine.pool(role)
        if pool.tp * pool.pp != gpus_per_machine:
            raise ConfigError(f"study.variants.{label}: engine.{role} runs tp={pool.tp} x pp={pool.pp}, but a "
                              f"machine is {gpus_per_machine} GPUs (one instance per machine)")
        hardware[role] = pool.hardware or cfg.hardware.name
    return Design(label, tuple(overrides), system, hardware, fixed)


@dataclass(frozen=True)
class Candidate:
    """Machine counts per pool role."""

    counts: Mapping[str, int]

    @property
    def n_machines(self) -> int:
        return sum(self.counts.values())

    def overrides(self) -> list[str]:
        return [f"system.{role}_instances={n}" for role, n in self.counts.items()]

    def split(self) -> str:
        """``7P/T`` for colocated machines, ``3P/4T`` (``+1M`` with a mixed pool) for Splitwise."""
        c = self.counts
        if "colocated" in c:
            return f"{c['colocated']}P/T"
        return f"{c['prefill']}P/{c['decode']}T" + (f"+{c['mixed']}M" if c.get("mixed") else "")

    def total(self, design: Design, machines: Mapping[str, MachineType], kind: str) -> float:
        return sum(n * machines[design.hardware[role]].resource(kind) for role, n in self.counts.items())


def _fits(total: float, budget: float) -> bool:
    return total <= budget * (1 + FIT_TOLERANCE)


def enumerate_candidates(design: Design, machines: Mapping[str, MachineType], kind: str, budget: float,
                         max_splits: int = 8) -> list[Candidate]:
    """Every Pareto-maximal count of the design's free pools within ``budget`` (of ``kind``), thinned
    evenly to ``max_splits``; [] when not even one machine per pool fits."""
    unit = {role: machines[hw].resource(kind) for role, hw in design.hardware.items()}
    left = budget - sum(n * unit[role] for role, n in design.fixed.items())
    if design.free_roles == ("colocated",):
        n = math.floor(left / unit["colocated"] * (1 + FIT_TOLERANCE))
        return [Candidate({"colocated": n})] if n >= 1 else []
    out = []
    p = 1
    while True:
        rest = left - p * unit["prefill"]
        t = math.floor(rest / unit["decode"] * (1 + FIT_TOLERANCE)) if rest > 0 else 0
        if t < 1:
            break
        if not _fits((p + 1) * unit["prefill"] + t * unit["decode"], left):  # maximal: no room for another prompt machine
            out.append(Candidate({"prefill": p, "decode": t, **design.fixed}))
        p += 1
    if len(out) > max_splits:
        keep = sorted({int(round(i)) for i in np.linspace(0, len(out) - 1, max_splits)})
        out = [out[i] for i in keep]
    return out


def candidate_config(cfg: Config, candidate: Candidate) -> Config:
    """``cfg`` with the candidate's pool counts (what composing ``candidate.overrides()`` on it gives)."""
    system = dataclasses.replace(cfg.system, **{f"{role}_instances": n for role, n in candidate.counts.items()})
    return dataclasses.replace(cfg, system=system)
