"""``study.params`` of the Splitwise provisioning study, with their defaults and checks (see the
package docstring for what each means)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from harness.probe_pool import check_parallel
from vocab.errors import ConfigError

BUDGET_KINDS = ("cost", "power")
CRITERIA = ("splitwise_slowdown", "attainment")
FAILED_SLOWDOWN = 1e9  # slowdown of a request that did not finish ok
SLOWDOWN_METRICS = ("ttft", "tbt", "e2e")
MAIN_SCENARIO = "main"  # the study's own assumptions; study.params.scenarios name the changed ones
# Splitwise Table VI: slowdown bounds at p50 / p90 / p99 against DGX-A100 without contention.
SPLITWISE_SLOWDOWN_BOUNDS: Mapping[str, tuple[float, ...]] = {
    "ttft": (2.0, 3.0, 6.0), "tbt": (1.25, 1.5, 5.0), "e2e": (1.25, 1.5, 5.0)}
DEFAULT_PARAMS: dict[str, Any] = {
    "traces": ["azure_code", "azure_conv"],
    "budgets": list(BUDGET_KINDS),
    "budget_machines": 40,
    "budget_hardware": "h100_80gb",
    "gpus_per_machine": 8,
    "machine_power_w": {},
    "max_splits": 8,
    "bisect_steps": 6,
    "max_expand": 8,
    "initial_rate_per_machine_rps": 1.0,
    "prune_dominated": True,
    "refine_growth": 1.25,
    "rate_rel_tol": 0.02,
    "criterion": "splitwise_slowdown",
    "reference_hardware": "a100_80gb",
    "reference_tp": 8,
    "quantiles": [50.0, 90.0, 99.0],
    "slowdown_bounds": {k: list(v) for k, v in SPLITWISE_SLOWDOWN_BOUNDS.items()},
    "reference_design": "baseline_a100",
    "scenarios": {},
    "parallel": "auto",
    "parallel_workers": None,
    "early_stop": True,
}
SCENARIO_KEYS = ("overrides", "traces", "budgets", "designs")


@dataclass(frozen=True)
class Scenario:
    """A sensitivity run: the study again with ``overrides`` added to every design, on a subset of the
    traces, budgets and designs (None: all of them)."""

    name: str
    overrides: tuple[str, ...]
    traces: Optional[tuple[str, ...]] = None
    budgets: Optional[tuple[str, ...]] = None
    designs: Optional[tuple[str, ...]] = None

    def covers(self, trace: str, budget: str, design: str) -> bool:
        return all(subset is None or value in subset
                   for subset, value in ((self.traces, trace), (self.budgets, budget), (self.designs, design)))


def _names(value: Any, key: str) -> Optional[tuple[str, ...]]:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ConfigError(f"study.params.{key}: expected a list of names, got {value!r}")
    return tuple(str(v) for v in value)


def _flag(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"study.params.{key}: expected true or false, got {value!r}")
    return value


def parse_scenarios(raw: Any) -> tuple[Scenario, ...]:
    """``study.params.scenarios``: name -> a list of overrides, or a mapping with ``overrides`` and optional
    ``traces``, ``budgets``, ``designs`` (the subsets to rerun)."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"study.params.scenarios: expected a mapping of name -> overrides, got {raw!r}")
    out = []
    for name, spec in raw.items():
        key = f"scenarios.{name}"
        if str(name) == MAIN_SCENARIO:
            raise ConfigError(f"study.params.{key}: {MAIN_SCENARIO!r} names the study's own run; pick another name")
        if not isinstance(spec, Mapping):
            spec = {"overrides": spec}
        unknown = sorted(set(spec) - set(SCENARIO_KEYS))
        if unknown:
            raise ConfigError(f"study.params.{key}: unknown key(s) {', '.join(map(str, unknown))}; "
                              f"known: {', '.join(SCENARIO_KEYS)}")
        overrides = _names(spec.get("overrides"), f"{key}.overrides")
        if not overrides:
            raise ConfigError(f"study.params.{key}.overrides: give at least one override")
        out.append(Scenario(str(name), overrides, _names(spec.get("traces"), f"{key}.traces"),
                            _names(spec.get("budgets"), f"{key}.budgets"), _names(spec.get("designs"), f"{key}.designs")))
    return tuple(out)


@dataclass(frozen=True)
class ProvisioningParams:
    """``study.params`` of this study, checked (see the module docstring)."""

    traces: tuple[str, ...]
    budgets: tuple[str, ...]
    budget_machines: float
    budget_hardware: str
    gpus_per_machine: int
    machine_power_w: Mapping[str, float]
    max_splits: int
    bisect_steps: int
    max_expand: int
    initial_rate_per_machine_rps: float
    prune_dominated: bool
    refine_growth: float
    rate_rel_tol: float
    criterion: str
    reference_hardware: str
    reference_tp: int
    quantiles: tuple[float, ...]
    slowdown_bounds: Mapping[str, tuple[float, ...]]
    reference_design: str
    scenarios: tuple[Scenario, ...] = ()
    parallel: str = "auto"  # where the design x trace searches run (harness.probe_pool.MODES)
    parallel_workers: Optional[int] = None
    early_stop: bool = True  # stop a probe once it has provably failed the Splitwise SLO (early_stop.py)

    @classmethod
    def from_mapping(cls, params: Mapping[str, Any]) -> ProvisioningParams:
        unknown = sorted(set(params) - set(DEFAULT_PARAMS))
        if unknown:
            raise ConfigError(f"study.params: unknown key(s) {', '.join(unknown)} for splitwise_provisioning; "
                              f"known: {', '.join(DEFAULT_PARAMS)}")
        p = {**DEFAULT_PARAMS, **dict(params)}
        bounds = {str(k): tuple(float(x) for x in v) for k, v in dict(p["slowdown_bounds"]).items()}
        out = cls(traces=tuple(str(t) for t in p["traces"]), budgets=tuple(str(b) for b in p["budgets"]),
                  budget_machines=float(p["budget_machines"]), budget_hardware=str(p["budget_hardware"]),
                  gpus_per_machine=int(p["gpus_per_machine"]),
                  machine_power_w={str(k): float(v) for k, v in dict(p["machine_power_w"]).items()},
                  max_splits=int(p["max_splits"]), bisect_steps=int(p["bisect_steps"]),
                  max_expand=int(p["max_expand"]),
                  initial_rate_per_machine_rps=float(p["initial_rate_per_machine_rps"]),
                  prune_dominated=bool(p["prune_dominated"]), refine_growth=float(p["refine_growth"]),
                  rate_rel_tol=float(p["rate_rel_tol"]),
                  criterion=str(p["criterion"]), reference_hardware=str(p["reference_hardware"]),
                  reference_tp=int(p["reference_tp"]), quantiles=tuple(float(q) for q in p["quantiles"]),
                  slowdown_bounds=bounds, reference_design=str(p["reference_design"]),
                  scenarios=parse_scenarios(p["scenarios"]), parallel=p["parallel"],
                  parallel_workers=p["parallel_workers"], early_stop=_flag(p["early_stop"], "early_stop"))
        out.check()
        return out

    def check(self) -> None:
        check_parallel(self.parallel, self.parallel_workers)
        if not self.traces:
            raise ConfigError("study.params.traces: give at least one workload group name")
        bad = [b for b in self.budgets if b not in BUDGET_KINDS]
        if bad or not self.budgets:
            raise ConfigError(f"study.params.budgets: expected a non-empty list of {', '.join(BUDGET_KINDS)}, "
                              f"got {list(self.budgets)}")
        if self.criterion not in CRITERIA:
            raise ConfigError(f"study.params.criterion: expected one of {', '.join(CRITERIA)}, got {self.criterion!r}")
        for key in ("budget_machines", "gpus_per_machine", "max_splits", "initial_rate_per_machine_rps",
                    "reference_tp"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"study.params.{key}: must be > 0, got {getattr(self, key)}")
        for key in ("bisect_steps", "max_expand", "rate_rel_tol"):
            if getattr(self, key) < 0:
                raise ConfigError(f"study.params.{key}: must be >= 0, got {getattr(self, key)}")
        if not self.refine_growth > 1:
            raise ConfigError(f"study.params.refine_growth: must be > 1, got {self.refine_growth}")
        if sorted(self.slowdown_bounds) != sorted(SLOWDOWN_METRICS):
            raise ConfigError(f"study.params.slowdown_bounds: needs exactly the keys {', '.join(SLOWDOWN_METRICS)}")
        for key, values in self.slowdown_bounds.items():
            if len(values) != len(self.quantiles) or not all(v > 0 for v in values):
                raise ConfigError(f"study.params.slowdown_bounds.{key}: needs {len(self.quantiles)} bounds > 0 "
                                  f"(one per quantile), got {list(values)}")
        if not all(0 < q <= 100 for q in self.quantiles):
            raise ConfigError(f"study.params.quantiles: percentiles in (0, 100], got {list(self.quantiles)}")
        for scenario in self.scenarios:
            for key, subset, known in (("traces", scenario.traces, self.traces),
                                       ("budgets", scenario.budgets, self.budgets)):
                extra = sorted(set(subset or ()) - set(known))
                if extra:
                    raise ConfigError(f"study.params.scenarios.{scenario.name}.{key}: {', '.join(extra)} not in "
                                      f"study.params.{key} ({', '.join(known)})")
