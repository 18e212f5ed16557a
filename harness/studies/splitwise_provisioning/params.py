"""``study.params`` of the Splitwise provisioning study, with their defaults and checks (see the
package docstring for what each means)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.errors import ConfigError

BUDGET_KINDS = ("cost", "power")
CRITERIA = ("splitwise_slowdown", "attainment")
FAILED_SLOWDOWN = 1e9  # slowdown of a request that did not finish ok
SLOWDOWN_METRICS = ("ttft", "tbt", "e2e")
# Splitwise Table VI: slowdown bounds at p50 / p90 / p99 against DGX-A100 without contention.
SPLITWISE_SLOWDOWN_BOUNDS: Mapping[str, tuple[float, ...]] = {
    "ttft": (2.0, 3.0, 6.0), "tbt": (1.25, 1.5, 5.0), "e2e": (1.25, 1.5, 5.0)}
DEFAULT_PARAMS: dict[str, Any] = {
    "traces": ["azure_code", "azure_conv"],
    "budgets": list(BUDGET_KINDS),
    "budget_a100_machines": 7,
    "budget_hardware": "a100_80gb",
    "gpus_per_machine": 8,
    "machine_power_w": {},
    "max_splits": 8,
    "bisect_steps": 6,
    "max_expand": 8,
    "initial_rate_per_machine_rps": 1.0,
    "criterion": "splitwise_slowdown",
    "reference_hardware": "a100_80gb",
    "reference_tp": 8,
    "quantiles": [50.0, 90.0, 99.0],
    "slowdown_bounds": {k: list(v) for k, v in SPLITWISE_SLOWDOWN_BOUNDS.items()},
    "reference_design": "baseline_a100",
}


@dataclass(frozen=True)
class ProvisioningParams:
    """``study.params`` of this study, checked (see the module docstring)."""

    traces: tuple[str, ...]
    budgets: tuple[str, ...]
    budget_a100_machines: float
    budget_hardware: str
    gpus_per_machine: int
    machine_power_w: Mapping[str, float]
    max_splits: int
    bisect_steps: int
    max_expand: int
    initial_rate_per_machine_rps: float
    criterion: str
    reference_hardware: str
    reference_tp: int
    quantiles: tuple[float, ...]
    slowdown_bounds: Mapping[str, tuple[float, ...]]
    reference_design: str

    @classmethod
    def from_mapping(cls, params: Mapping[str, Any]) -> ProvisioningParams:
        unknown = sorted(set(params) - set(DEFAULT_PARAMS))
        if unknown:
            raise ConfigError(f"study.params: unknown key(s) {', '.join(unknown)} for splitwise_provisioning; "
                              f"known: {', '.join(DEFAULT_PARAMS)}")
        p = {**DEFAULT_PARAMS, **dict(params)}
        bounds = {str(k): tuple(float(x) for x in v) for k, v in dict(p["slowdown_bounds"]).items()}
        out = cls(traces=tuple(str(t) for t in p["traces"]), budgets=tuple(str(b) for b in p["budgets"]),
                  budget_a100_machines=float(p["budget_a100_machines"]), budget_hardware=str(p["budget_hardware"]),
                  gpus_per_machine=int(p["gpus_per_machine"]),
                  machine_power_w={str(k): float(v) for k, v in dict(p["machine_power_w"]).items()},
                  max_splits=int(p["max_splits"]), bisect_steps=int(p["bisect_steps"]),
                  max_expand=int(p["max_expand"]),
                  initial_rate_per_machine_rps=float(p["initial_rate_per_machine_rps"]),
                  criterion=str(p["criterion"]), reference_hardware=str(p["reference_hardware"]),
                  reference_tp=int(p["reference_tp"]), quantiles=tuple(float(q) for q in p["quantiles"]),
                  slowdown_bounds=bounds, reference_design=str(p["reference_design"]))
        out.check()
        return out

    def check(self) -> None:
        if not self.traces:
            raise ConfigError("study.params.traces: give at least one workload group name")
        bad = [b for b in self.budgets if b not in BUDGET_KINDS]
        if bad or not self.budgets:
            raise ConfigError(f"study.params.budgets: expected a non-empty list of {', '.join(BUDGET_KINDS)}, "
                              f"got {list(self.budgets)}")
        if self.criterion not in CRITERIA:
            raise ConfigError(f"study.params.criterion: expected one of {', '.join(CRITERIA)}, got {self.criterion!r}")
        for key in ("budget_a100_machines", "gpus_per_machine", "max_splits", "initial_rate_per_machine_rps",
                    "reference_tp"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"study.params.{key}: must be > 0, got {getattr(self, key)}")
        for key in ("bisect_steps", "max_expand"):
            if getattr(self, key) < 0:
                raise ConfigError(f"study.params.{key}: must be >= 0, got {getattr(self, key)}")
        if sorted(self.slowdown_bounds) != sorted(SLOWDOWN_METRICS):
            raise ConfigError(f"study.params.slowdown_bounds: needs exactly the keys {', '.join(SLOWDOWN_METRICS)}")
        for key, values in self.slowdown_bounds.items():
            if len(values) != len(self.quantiles) or not all(v > 0 for v in values):
                raise ConfigError(f"study.params.slowdown_bounds.{key}: needs {len(self.quantiles)} bounds > 0 "
                                  f"(one per quantile), got {list(values)}")
        if not all(0 < q <= 100 for q in self.quantiles):
            raise ConfigError(f"study.params.quantiles: percentiles in (0, 100], got {list(self.quantiles)}")
