"""The Splitwise provisioning study's orchestration: compose every design on every trace, bisect each
candidate split for its highest passing rate (:mod:`.search`), choose the best per design and write the
tables; then the same for each sensitivity scenario (``study.params.scenarios``). Each chosen split at
its highest passing rate (the point the claims read) is assessed against ``validity``: ``valid`` and
``validity_reasons`` in ``study.csv``, every block in ``summary.json``.

The searches, one task per scenario x trace x design (all of them in one batch), and the simulations of the
chosen splits go through the probe pool ``study.params.parallel`` names (:mod:`harness.probe_pool`); the
results are merged in the in-process order, so the tables are the same wherever they ran (only the wall
times differ)."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.config import Config
from harness.jobs import JobResult
from harness.probe_pool import probe_pool
from harness.results import RunFolder, records_frame
from harness.studies.splitwise_provisioning.machines import MachineType, design_from_config, machine_type
from harness.studies.splitwise_provisioning.params import MAIN_SCENARIO, ProvisioningParams, Scenario
from harness.studies.splitwise_provisioning.search import (
    ProvisioningRun,
    TracePlan,
    at_rate,
    candidate_records,
    design_tasks,
    merge_outcomes,
    search_design,
    unit_rate_requests,
)
from harness.studies.splitwise_provisioning.slowdown import reference_model
from harness.studies.variants import compose_variant, job_overrides
from harness.validity import assess_validity, combine_validity
from vocab.errors import ConfigError
from vocab.result_files import PROBES_FILE, REQUESTS_FILE, SENSITIVITY_FILE, STUDY_FILE

__all__ = ["at_rate", "choose", "plan_traces", "run_splitwise_provisioning", "unit_rate_requests"]

log = logging.getLogger(__name__)
GROUP = ["scenario", "trace", "budget"]


def _workload_free(overrides: Sequence[str]) -> list[str]:
    """The job's overrides without a workload group choice (each trace sets its own)."""
    return [o for o in overrides if not o.lstrip("+~").startswith("workload=")]


def choose(table: pd.DataFrame, reference_design: str) -> pd.DataFrame:
    """Mark the best feasible candidate per (scenario x) trace x budget x design (highest rate, then lower
    budget use, then fewer machines; pruned rows never) and add ratios against ``reference_design``'s
    chosen candidate of the same scenario, trace and budget."""
    table = table.copy()
    if "scenario" not in table:
        table["scenario"] = MAIN_SCENARIO
    table["chosen"] = False
    order = table.assign(_used=table["budget_used_fraction"].fillna(np.inf)).sort_values(
        ["max_rate_rps", "_used", "n_machines"], ascending=[False, True, True], kind="mergesort", na_position="last")
    ok = order["feasible"].astype(bool) & order["max_rate_rps"].notna()
    best = order[ok].groupby([*GROUP, "design"], sort=False).head(1).index
    table.loc[best, "chosen"] = True
    keys = pd.MultiIndex.from_frame(table[GROUP])
    for col, name in (("max_rate_rps", "throughput"), ("throughput_per_usd_hr", "per_usd_hr"),
                      ("throughput_per_kw", "per_kw")):
        ref = table[table["chosen"] & (table["design"] == reference_design)].set_index(GROUP)[col]
        with np.errstate(divide="ignore", invalid="ignore"):
            table[f"{name}_vs_{reference_design}"] = (table[col].to_numpy(dtype=float)
                                                     / ref.reindex(keys).to_numpy(dtype=float))
    return table


def plan_traces(cfg: Config, params: ProvisioningParams, machines: dict[str, MachineType],
                scenario: Scenario | None = None) -> list[TracePlan]:
    """Compose and check every design on every trace (before any simulation) for the main run or a
    ``scenario`` (its overrides on every design; its traces and designs only); fills ``machines``."""
    base = _workload_free(job_overrides())
    extra = list(scenario.overrides) if scenario else []
    name = scenario.name if scenario else MAIN_SCENARIO
    plans = []
    for trace in params.traces:
        if scenario and scenario.traces is not None and trace not in scenario.traces:
            continue
        designs = []
        for label, overrides in cfg.study.variants.items():
            if scenario and scenario.designs is not None and label not in scenario.designs:
                continue
            full = [*overrides, *extra]
            vcfg = compose_variant([*base, f"workload={trace}", *full])
            design = design_from_config(label, full, vcfg, params.gpus_per_machine)
            for hw in design.hardware.values():
                if hw not in machines:
                    machines[hw] = machine_type(hw, params.gpus_per_machine, params.machine_power_w)
            designs.append((design, vcfg))
        first = designs[0][1]
        if len({vcfg.model.name for _, vcfg in designs}) != 1:
            raise ConfigError("study.variants: every design must serve the same model")
        plans.append(TracePlan(trace, designs, unit_rate_requests(first, cfg.study.max_requests),
                               reference_model(first, params), name))
    return plans


def _budgets(params: ProvisioningParams, scenario: Scenario | None) -> list[str]:
    return [b for b in params.budgets if scenario is None or scenario.budgets is None or b in scenario.budgets]


def _check_scenarios(cfg: Config, params: ProvisioningParams) -> None:
    for scenario in params.scenarios:
        unknown = sorted(set(scenario.designs or ()) - set(cfg.study.variants))
        if unknown:
            raise ConfigError(f"study.params.scenarios.{scenario.name}.designs: {', '.join(unknown)} not in "
                              f"study.variants ({', '.join(cfg.study.variants)})")


def run_splitwise_provisioning(cfg: Config, folder: RunFolder) -> JobResult:
    study = cfg.study
    params = ProvisioningParams.from_mapping(study.params)
    if not study.variants:
        raise ConfigError("study.variants: splitwise_provisioning needs the designs (label -> overrides)")
    _check_scenarios(cfg, params)
    budget_machine = machine_type(params.budget_hardware, params.gpus_per_machine, params.machine_power_w)
    machines = {budget_machine.hardware: budget_machine}
    plans = plan_traces(cfg, params, machines)
    scenario_plans = [(s, plan_traces(cfg, params, machines, s)) for s in params.scenarios]  # checked before any run
    start = time.perf_counter()
    main_tasks = design_tasks(params, plans, machines, budget_machine, _budgets(params, None))
    scenario_tasks = [design_tasks(params, splans, machines, budget_machine, _budgets(params, s))
                      for s, splans in scenario_plans]
    with probe_pool(params.parallel, params.parallel_workers, Path(folder.path),
                    progress=cfg.engine.progress) as pool:
        outcomes = pool.map(functools.partial(search_design, params, machines),
                            [*main_tasks, *(t for tasks in scenario_tasks for t in tasks)],
                            desc="designs x traces (all scenarios)")
        run = ProvisioningRun(params, machines)
        merge_outcomes(run, main_tasks, outcomes[:len(main_tasks)])
        table = choose(pd.DataFrame(run.rows), params.reference_design)
        chosen = [int(i) for i in table.index[table["chosen"]] if float(table.at[i, "max_rate_rps"]) > 0]
        # the chosen splits at their highest passing rates: the points the claims are computed from
        items = [(run.sources[i][0], run.sources[i][1], run.sources[i][2].requests,
                  float(table.at[i, "max_rate_rps"])) for i in chosen]
        chosen_records = dict(zip(chosen, pool.map(candidate_records, items, desc="chosen splits"), strict=True))
    files = {"study": STUDY_FILE, "probes": PROBES_FILE}
    probes = list(run.probes)
    n_sims, sim_wall = run.n_simulations, run.sim_wall_s
    frames = []
    validities: dict[str, dict[str, Any]] = {}
    table["valid"], table["validity_reasons"] = None, None
    for index in table.index[table["chosen"]]:
        rate = float(table.at[index, "max_rate_rps"])
        if rate > 0:
            records = chosen_records[int(index)]
            validity = assess_validity(records, {}, cfg.validity, offered_rate_rps=rate)
            validities["/".join(str(table.at[index, k]) for k in ("trace", "budget", "design"))] = validity
            table.at[index, "valid"] = validity["valid"]
            table.at[index, "validity_reasons"] = "; ".join(validity["reasons"])
            frame = records_frame(records)
            for i, key in enumerate(("trace", "budget", "design", "split")):
                frame.insert(i, key, table.at[index, key])
            frames.append(frame)
    folder.write_table(STUDY_FILE, table)
    if frames:
        folder.write_table(REQUESTS_FILE, pd.concat(frames, ignore_index=True))
        files["requests"] = REQUESTS_FILE
    sensitivity = []
    done = len(main_tasks)
    for tasks in scenario_tasks:
        srun = ProvisioningRun(params, machines)
        merge_outcomes(srun, tasks, outcomes[done:done + len(tasks)])
        done += len(tasks)
        sensitivity.append(choose(pd.DataFrame(srun.rows), params.reference_design))
        probes += srun.probes
        n_sims, sim_wall = n_sims + srun.n_simulations, sim_wall + srun.sim_wall_s
    tables = {"study": table}
    if sensitivity:
        tables["sensitivity"] = pd.concat(sensitivity, ignore_index=True)
        folder.write_table(SENSITIVITY_FILE, tables["sensitivity"])
        files["sensitivity"] = SENSITIVITY_FILE
    folder.write_table(PROBES_FILE, pd.DataFrame(probes))
    metrics = {"study": study.kind, "figure": study.figure, "criterion": params.criterion,
               "n_candidates": int(table["feasible"].astype(bool).sum()), "n_simulations": n_sims,
               "simulation_wall_s": sim_wall, "wall_s": time.perf_counter() - start,
               "chosen": _chosen_summary(table, params.reference_design)}
    if sensitivity:
        metrics["sensitivity"] = {s.name: _chosen_summary(t, params.reference_design)
                                  for s, t in zip(params.scenarios, sensitivity, strict=True)}
    return JobResult(metrics=metrics, validity=combine_validity(validities, kind="chosen"), files=files,
                     tables=tables)


def _chosen_summary(table: pd.DataFrame, ref: str) -> dict[str, dict[str, Any]]:
    cols = ["split", "n_machines", "max_rate_rps", "cost_usd_hr", "power_kw", "throughput_per_usd_hr",
            "throughput_per_kw", f"throughput_vs_{ref}", f"per_usd_hr_vs_{ref}", f"per_kw_vs_{ref}"]
    return {f"{r['trace']}/{r['budget']}/{r['design']}": {c: _plain(r.get(c)) for c in cols}
            for _, r in table[table["chosen"]].iterrows()}


def _plain(value: Any) -> Any:
    """JSON-able scalar (NaN/inf -> None)."""
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return None if not np.isfinite(value) else float(value)
    return value
