"""Splitwise provisioning study: machine cost/power from the hardware YAMLs, budget enumeration,
slowdowns against the uncontended run, the choice of the best candidate, and a tiny end-to-end run
(its rate search is tested in test_capacity.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from harness.metrics import request_frame
from harness.results import RunFolder
from harness.studies.simulate import load_requests, point_workload, simulate
from harness.studies.splitwise_provisioning import run_splitwise_provisioning
from harness.studies.splitwise_provisioning.machines import (
    Candidate,
    Design,
    MachineType,
    candidate_config,
    design_from_config,
    enumerate_candidates,
    machine_type,
)
from harness.studies.splitwise_provisioning.params import FAILED_SLOWDOWN, ProvisioningParams
from harness.studies.splitwise_provisioning.search import Probe, ProvisioningRun, TracePlan, middle_out
from harness.studies.splitwise_provisioning.slowdown import (
    meets_slowdowns,
    reference_model,
    slowdown_percentiles,
)
from harness.studies.splitwise_provisioning.study import at_rate, choose, unit_rate_requests
from harness.studies.variants import compose_variant
from systems.hardware_catalog import load_hardware
from systems.sim.simulated_deployment import SimulatedDeployment
from systems.sim.simulation import Simulation
from vocab.errors import ConfigError

PRESET = "experiment=splitwise_provisioning"
HW = ("a100_80gb", "h100_80gb", "h100_80gb_pcap")


@pytest.fixture(scope="module")
def machines():
    return {hw: machine_type(hw) for hw in HW}


def splitwise(prompt: str, token: str, mixed: int = 0) -> Design:
    hardware = {"prefill": prompt, "decode": token, **({"mixed": prompt} if mixed else {})}
    return Design("d", (), "splitwise", hardware, {"mixed": mixed} if mixed else {})


def baseline(hw: str) -> Design:
    return Design("b", (), "vllm_baseline", {"colocated": hw}, {})


# --- cost and power --------------------------------------------------------------------------------


def test_machine_cost_and_power_are_8_gpus_of_the_yaml():
    for hw in HW:
        m, y = machine_type(hw), load_hardware(hw)
        assert m.cost_usd_hr == pytest.approx(8 * y.price_per_hour_usd)
        assert m.power_kw == pytest.approx(8 * y.power_w / 1e3)


def test_machine_figures_match_splitwise_table_1(machines):
    # Table I: $17.6/hr and $38/hr per DGX; 400 W and 700 W per GPU; HHcap token machines at 70% power.
    assert machines["a100_80gb"].cost_usd_hr == pytest.approx(17.6)
    assert machines["h100_80gb"].cost_usd_hr == pytest.approx(38.0)
    assert machines["a100_80gb"].power_kw == pytest.approx(3.2)
    assert machines["h100_80gb"].power_kw == pytest.approx(5.6)
    assert machines["h100_80gb_pcap"].power_kw == pytest.approx(0.7 * 5.6)
    assert machines["h100_80gb_pcap"].cost_usd_hr == machines["h100_80gb"].cost_usd_hr
    # the paper's iso-power pair: 70 DGX-A100 draw what 40 DGX-H100 draw
    assert 70 * machines["a100_80gb"].power_kw == pytest.approx(40 * machines["h100_80gb"].power_kw)


def test_machine_power_override_in_watts():
    assert machine_type("a100_80gb", power_w={"a100_80gb": 6500}).power_kw == pytest.approx(6.5)


# --- enumeration -----------------------------------------------------------------------------------


def splits(cands):
    return [(c.counts["prefill"], c.counts["decode"]) for c in cands]


@pytest.mark.parametrize("design", [splitwise("a100_80gb", "a100_80gb"), splitwise("h100_80gb", "h100_80gb"),
                                    splitwise("h100_80gb", "a100_80gb"), splitwise("h100_80gb", "h100_80gb_pcap"),
                                    splitwise("a100_80gb", "h100_80gb"), splitwise("h100_80gb", "a100_80gb", mixed=1),
                                    baseline("a100_80gb"),
                                    baseline("h100_80gb")])
@pytest.mark.parametrize("kind", ["cost", "power"])
@pytest.mark.parametrize("n_a100", [3, 7, 11])
def test_enumeration_fits_the_budget_and_is_maximal(machines, design, kind, n_a100):
    budget = n_a100 * machines["a100_80gb"].resource(kind)
    cands = enumerate_candidates(design, machines, kind, budget, max_splits=100)
    unit = {role: machines[hw].resource(kind) for role, hw in design.hardware.items()}
    for c in cands:
        total = c.total(design, machines, kind)
        assert total <= budget * (1 + 1e-9)
        assert all(n >= 1 for n in c.counts.values())
        assert c.counts.get("mixed", 0) == design.fixed.get("mixed", 0)
        for role in design.free_roles:  # one more machine of any enumerated pool would not fit
            assert total + unit[role] > budget * (1 + 1e-9)
    assert len({tuple(sorted(c.counts.items())) for c in cands}) == len(cands)


def test_enumeration_examples(machines):
    power = 7 * machines["a100_80gb"].power_kw  # 22.4 kW
    cost = 7 * machines["a100_80gb"].cost_usd_hr  # $123.2/hr
    assert splits(enumerate_candidates(splitwise("h100_80gb", "a100_80gb"), machines, "power", power)) == [
        (1, 5), (2, 3), (3, 1)]
    assert splits(enumerate_candidates(splitwise("h100_80gb", "h100_80gb"), machines, "cost", cost)) == [(1, 2), (2, 1)]
    assert splits(enumerate_candidates(splitwise("a100_80gb", "a100_80gb"), machines, "cost", cost)) == [
        (p, 7 - p) for p in range(1, 7)]
    # 7 x 3.2 kW == 4 x 5.6 kW exactly: float rounding must not lose the fourth machine
    assert [c.counts for c in enumerate_candidates(baseline("h100_80gb"), machines, "power", power)] == [
        {"colocated": 4}]
    assert enumerate_candidates(splitwise("h100_80gb", "h100_80gb"), machines, "cost", 17.6 * 4) == []
    # prompt machines cheaper than token machines: (p, max t) can leave room for another prompt machine
    assert splits(enumerate_candidates(splitwise("a100_80gb", "h100_80gb"), machines, "cost", cost)) == [(2, 2), (4, 1)]
    # budgets that are whole multiples of a machine must buy that many despite float rounding (0.3 / 0.1 < 3)
    tenth = {"x": MachineType("x", 8, 0.1, 0.1)}
    assert enumerate_candidates(baseline("x"), tenth, "cost", 0.3)[0].counts == {"colocated": 3}
    thinned = enumerate_candidates(splitwise("a100_80gb", "a100_80gb"), machines, "cost", cost, max_splits=3)
    assert splits(thinned) == [(1, 6), (3, 4), (6, 1)]


def test_candidate_config_equals_composing_the_overrides():
    overrides = [PRESET, "workload=azure_code", "system=splitwise", "engine.prefill.hardware=h100_80gb"]
    cfg = compose_variant(overrides)
    cand = Candidate({"prefill": 3, "decode": 2})
    assert candidate_config(cfg, cand) == compose_variant([*overrides, *cand.overrides()])
    assert cand.split() == "3P/2T" and Candidate({"colocated": 7}).split() == "7P/T"


# --- requests at a rate, slowdowns -----------------------------------------------------------------


def test_scaled_schedule_equals_the_composed_poisson_schedule():
    cfg = compose_variant([PRESET, "workload=azure_conv"])
    base = unit_rate_requests(cfg, 50)
    for rate in (0.37, 12.5):
        direct = load_requests(cfg, point_workload(cfg, rate_rps=rate, max_requests=50))
        scaled = at_rate(base, rate)
        assert [dataclasses.replace(s, arrival_s=0.0) for s in scaled.specs] == \
            [dataclasses.replace(s, arrival_s=0.0) for s in direct.specs]
        np.testing.assert_allclose([s.arrival_s for s in scaled.specs], [s.arrival_s for s in direct.specs],
                                   rtol=1e-12, atol=1e-12)
        assert scaled.schedule.offered_rate_rps == pytest.approx(direct.schedule.offered_rate_rps)


def test_slowdowns_against_the_uncontended_reference():
    cfg = compose_variant([PRESET])
    params = ProvisioningParams.from_mapping({})
    ref = reference_model(cfg, params)
    inp, out = np.array([100, 1500, 3000, 700]), np.array([20, 13, 200, 1])
    lat = ref.latencies_ms(inp, out)
    assert lat["ttft"][1] > lat["ttft"][0] and lat["e2e"][3] == lat["ttft"][3]
    frame = pd.DataFrame({"status": ["ok"] * 4, "input_length": inp, "output_length": out,
                          "ttft_ms": lat["ttft"], "tpot_ms": np.where(out > 1, lat["tbt"], np.nan), "e2e_ms": lat["e2e"]})
    alone = slowdown_percentiles(frame, ref, params.quantiles)
    assert all(v == pytest.approx(1.0) for v in alone.values()) and len(alone) == 9
    assert meets_slowdowns(alone, params)
    slow = frame.assign(tpot_ms=frame["tpot_ms"] * 1.3)  # every TBT 1.3x: p50 bound 1.25 broken
    assert not meets_slowdowns(slowdown_percentiles(slow, ref, params.quantiles), params)
    failed = frame.assign(status=["ok", "ok", "ok", "failed"])
    values = slowdown_percentiles(failed, ref, params.quantiles)
    assert values["p99_ttft_slowdown"] > 1e6 and values["p50_ttft_slowdown"] == pytest.approx(1.0)
    assert max(max(b) for b in params.slowdown_bounds.values()) < FAILED_SLOWDOWN


@pytest.mark.parametrize("timing", ["ours", "splitwise_sim"])
def test_uncontended_run_on_the_reference_machine_has_slowdown_one(timing):
    cfg = compose_variant([PRESET, "workload=azure_conv", "system=vllm_baseline", "system.colocated_instances=1",
                           "engine.sample_interval_s=1e9", f"engine.token_phase_timing={timing}"])
    params = ProvisioningParams.from_mapping({})
    requests = at_rate(unit_rate_requests(cfg, 30), 1e-5)  # ~10^5 s apart: every request runs alone
    point = simulate(SimulatedDeployment(cfg), requests)
    values = slowdown_percentiles(request_frame(point.records), reference_model(cfg, params), params.quantiles)
    for key, value in values.items():
        assert value == pytest.approx(1.0, abs=1e-3), key


def test_params_are_checked():
    with pytest.raises(ConfigError, match="no_such"):
        ProvisioningParams.from_mapping({"no_such": 1})
    with pytest.raises(ConfigError, match="budgets"):
        ProvisioningParams.from_mapping({"budgets": ["space"]})
    with pytest.raises(ConfigError, match="slowdown_bounds.tbt"):
        ProvisioningParams.from_mapping({"slowdown_bounds": {"ttft": [2, 3, 6], "tbt": [1], "e2e": [1, 2, 3]}})


def test_design_needs_one_instance_per_machine():
    cfg = compose_variant([PRESET, "system=splitwise", "engine.decode.tp=4"])
    with pytest.raises(ConfigError, match="engine.decode"):
        design_from_config("x", [], cfg, 8)
    ok = design_from_config("x", [], compose_variant([PRESET, "system=vllm_baseline"]), 8)
    assert ok.hardware == {"colocated": "a100_80gb"} and ok.free_roles == ("colocated",)


# --- choosing and the end-to-end run ---------------------------------------------------------------


def test_choose_best_per_design_and_ratios():
    rows = [
        {"trace": "t", "budget": "cost", "design": "baseline_a100", "feasible": True, "max_rate_rps": 2.0,
         "budget_used_fraction": 1.0, "n_machines": 7, "throughput_per_usd_hr": 2.0 / 100, "throughput_per_kw": 2.0 / 20},
        {"trace": "t", "budget": "cost", "design": "aa", "feasible": True, "max_rate_rps": 3.0,
         "budget_used_fraction": 1.0, "n_machines": 7, "throughput_per_usd_hr": 3.0 / 100, "throughput_per_kw": 3.0 / 20},
        {"trace": "t", "budget": "cost", "design": "aa", "feasible": True, "max_rate_rps": 3.0,
         "budget_used_fraction": 0.9, "n_machines": 6, "throughput_per_usd_hr": 3.0 / 90, "throughput_per_kw": 3.0 / 18},
        {"trace": "t", "budget": "cost", "design": "aa", "feasible": True, "max_rate_rps": 1.0,
         "budget_used_fraction": 0.5, "n_machines": 3, "throughput_per_usd_hr": 1.0 / 50, "throughput_per_kw": 1.0 / 10},
        {"trace": "t", "budget": "cost", "design": "hh", "feasible": False, "max_rate_rps": 0.0,
         "budget_used_fraction": np.nan, "n_machines": 0, "throughput_per_usd_hr": np.nan, "throughput_per_kw": np.nan},
    ]
    table = choose(pd.DataFrame(rows), "baseline_a100")
    assert table["chosen"].tolist() == [True, False, True, False, False]
    assert table.loc[2, "throughput_vs_baseline_a100"] == pytest.approx(1.5)
    assert table.loc[2, "per_usd_hr_vs_baseline_a100"] == pytest.approx((3.0 / 90) / (2.0 / 100))


def test_tiny_end_to_end_run(tmp_path):
    cfg = compose_variant([PRESET, "study.max_requests=40"])
    variants = {"splitwise_ha": [PRESET, "system=splitwise", "engine.prefill.hardware=h100_80gb",
                                 "engine.decode.hardware=a100_80gb"]}
    params = {"traces": ["azure_code"], "budgets": ["power", "cost"], "budget_machines": 3,
              "budget_hardware": "a100_80gb", "bisect_steps": 2, "max_expand": 4,
              "scenarios": {"timing": {"overrides": ["engine.token_phase_timing=splitwise_sim"], "budgets": ["power"]}}}
    cfg = dataclasses.replace(cfg, study=dataclasses.replace(cfg.study, variants=variants, params=params))
    result = run_splitwise_provisioning(cfg, RunFolder(tmp_path))
    table = pd.read_csv(tmp_path / "study.csv")
    expected = {"trace", "budget", "budget_value", "design", "system", "prompt_hardware", "token_hardware",
                "feasible", "split", "n_prompt", "n_token", "n_machines", "n_gpus", "cost_usd_hr", "power_kw",
                "budget_used_fraction", "max_rate_rps", "rate_upper_rps", "throughput_per_usd_hr",
                "throughput_per_kw", "n_probes", "chosen", "overrides", "at_max_p99_ttft_slowdown",
                "throughput_vs_baseline_a100"}
    assert expected <= set(table.columns)
    # 3 A100 machines: 9.6 kW buys 1 H100 + 1 A100 (8.8 kW); $52.8/hr buys no H100 + A100 pair ($55.6)
    power = table[table["budget"] == "power"]
    assert power["split"].tolist() == ["1P/1T"] and power["chosen"].all()
    assert power["cost_usd_hr"].iloc[0] == pytest.approx(38 + 17.6)
    assert power["power_kw"].iloc[0] == pytest.approx(8.8)
    assert power["max_rate_rps"].iloc[0] > 0
    assert power["throughput_per_kw"].iloc[0] == pytest.approx(power["max_rate_rps"].iloc[0] / 8.8)
    assert power["throughput_vs_baseline_a100"].isna().all()  # no baseline design in this run
    cost = table[table["budget"] == "cost"]
    assert cost["feasible"].tolist() == [False] and not cost["chosen"].any()
    all_probes = pd.read_csv(tmp_path / "probes.csv")
    probes = all_probes[all_probes["scenario"] == "main"]
    assert len(probes) == power["n_probes"].iloc[0]
    assert len(all_probes) == result.metrics["n_simulations"]
    assert (probes[probes["passes"]]["rate_rps"] <= power["max_rate_rps"].iloc[0] + 1e-12).all()
    requests = pd.read_parquet(tmp_path / "requests.parquet")
    assert len(requests) == 40 and set(requests["design"]) == {"splitwise_ha"}
    assert set(result.metrics["chosen"]) == {"azure_code/power/splitwise_ha"}
    # the chosen split is assessed: 40 requests are fewer than the preset's validity.min_requests (1,000)
    assert power["valid"].tolist() == [False] and "1000" in power["validity_reasons"].iloc[0]
    assert result.validity["valid"] is False and set(result.validity["chosen"]) == {"azure_code/power/splitwise_ha"}
    assert result.files["study"] == "study.csv"
    sens = pd.read_csv(tmp_path / "sensitivity.csv")  # the scenario: power only, its own search
    assert set(sens["scenario"]) == {"timing"} and set(sens["budget"]) == {"power"}
    assert sens["split"].tolist() == ["1P/1T"] and sens["chosen"].all() and sens["max_rate_rps"].iloc[0] > 0
    assert "engine.token_phase_timing=splitwise_sim" in sens["overrides"].iloc[0]
    assert set(result.metrics["sensitivity"]["timing"]) == {"azure_code/power/splitwise_ha"}
    assert len(all_probes) == len(probes) + sens["n_probes"].sum()


# --- the search: order, pruning, scenarios, presets -----------------------------------------------


def test_middle_out_order():
    assert middle_out(4) == [1, 2, 0, 3]
    assert middle_out(5) == [2, 1, 3, 0, 4]
    assert middle_out(1) == [0] and middle_out(0) == []


CAPACITY = {1: 5.0, 2: 9.0, 3: 12.0, 4: 7.0, 5: 3.0}  # req/s a split with this many prompt machines sustains


def capacity_run(monkeypatch, prune: bool) -> ProvisioningRun:
    """A run whose evaluation passes below CAPACITY[prompt machines] (no simulation)."""

    def evaluate(self, cluster, plan, rate):
        self.n_simulations += 1
        ok = rate <= CAPACITY[cluster.cfg.system.prefill_instances]
        return ok, Probe({"rate_rps": rate, "passes": ok})

    monkeypatch.setattr(ProvisioningRun, "evaluate", evaluate)
    params = ProvisioningParams.from_mapping({"prune_dominated": prune, "budget_hardware": "a100_80gb"})
    return ProvisioningRun(params, {"a100_80gb": machine_type("a100_80gb")})


def aa_design():
    overrides = ["system=splitwise", "engine.prefill.hardware=a100_80gb", "engine.decode.hardware=a100_80gb"]
    cfg = compose_variant([PRESET, *overrides])
    return design_from_config("splitwise_aa", overrides, cfg, 8), cfg


@pytest.mark.parametrize("prune", [True, False])
def test_pruned_splits_cannot_beat_the_best(monkeypatch, prune):
    run = capacity_run(monkeypatch, prune)
    design, cfg = aa_design()
    plan = TracePlan("t", [(design, cfg)], list(range(10)), None)  # type: ignore[arg-type]
    budget = 6 * run.machines["a100_80gb"].cost_usd_hr
    cands = enumerate_candidates(design, run.machines, "cost", budget)
    assert [c.counts["prefill"] for c in cands] == [1, 2, 3, 4, 5]
    run.design_rows(plan, "cost", budget, design, cfg, cands)
    table = choose(pd.DataFrame(run.rows), "baseline_a100")
    best = table[table["chosen"]].iloc[0]
    assert best["split"] == "3P/3T" and best["max_rate_rps"] == pytest.approx(12.0, rel=0.03)
    assert best["max_rate_rps"] <= 12.0
    if prune:  # 3P first (full search), then 2P, 4P, 1P, 5P: each fails at the best so far (one probe)
        assert table["pruned"].tolist() == [True, True, False, True, True]
        assert table.loc[table["pruned"], "n_probes"].tolist() == [1, 1, 1, 1]
        assert table.loc[table["pruned"], "max_rate_rps"].isna().all()
        assert (table.loc[table["pruned"], "rate_upper_rps"] == best["max_rate_rps"]).all()
    else:
        assert table["max_rate_rps"].to_numpy() == pytest.approx([CAPACITY[p] for p in range(1, 6)], rel=0.03)


def test_a_split_pruned_against_a_higher_best_is_searched_again(monkeypatch):
    run = capacity_run(monkeypatch, True)
    design, cfg = aa_design()
    plan = TracePlan("t", [(design, cfg)], list(range(10)), None)  # type: ignore[arg-type]
    budget = 6 * run.machines["a100_80gb"].cost_usd_hr
    cands = enumerate_candidates(design, run.machines, "cost", budget)
    run.design_rows(plan, "cost", budget, design, cfg, cands)
    run.design_rows(plan, "power", budget, design, cfg, [c for c in cands if c.counts["prefill"] != 3])
    second = pd.DataFrame(run.rows[5:])
    assert second.loc[second["split"] == "2P/4T", "max_rate_rps"].iloc[0] == pytest.approx(9.0, rel=0.03)
    assert not second.loc[second["split"] == "2P/4T", "reused"].iloc[0]


def test_scenarios_are_checked():
    ok = ProvisioningParams.from_mapping({"scenarios": {"t": ["engine.token_phase_timing=splitwise_sim"],
                                                        "u": {"overrides": ["x=1"], "budgets": ["power"]}}})
    assert [s.name for s in ok.scenarios] == ["t", "u"] and ok.scenarios[1].covers("a", "power", "d")
    assert not ok.scenarios[1].covers("a", "cost", "d")
    for bad, match in (({"main": ["x=1"]}, "scenarios.main"), ({"t": []}, "scenarios.t.overrides"),
                       ({"t": {"overrides": ["x=1"], "when": 1}}, "scenarios.t: unknown"),
                       ({"t": {"overrides": ["x=1"], "traces": ["nope"]}}, "scenarios.t.traces")):
        with pytest.raises(ConfigError, match=match):
            ProvisioningParams.from_mapping({"scenarios": bad})


@pytest.mark.parametrize("preset, budget, max_requests", [("splitwise_provisioning", 10, 1000),
                                                          ("splitwise_provisioning_full", 40, None)])
def test_presets_compose_with_the_papers_setup(compose, preset, budget, max_requests):
    cfg = compose([f"experiment={preset}"])
    assert cfg.experiment_name == "splitwise_provisioning"  # the report reads whichever finished last
    assert cfg.study.max_requests == max_requests
    params = ProvisioningParams.from_mapping(cfg.study.params)
    assert (params.budget_machines, params.budget_hardware) == (budget, "h100_80gb")
    assert [s.name for s in params.scenarios] == ["token_timing_ours", "llama2_70b"]
    assert [list(s.overrides) for s in params.scenarios] == [["engine.token_phase_timing=ours"], ["model=llama2_70b"]]
    # the paper's cluster results: BLOOM-176B (no grouped-query attention) timed as splitwise-sim times it
    assert cfg.model.name == "bloom_176b" and cfg.model.kv_bytes_per_token == 4_014_080
    engine = cfg.engine
    assert engine.token_phase_timing == "splitwise_sim"
    assert (engine.max_num_seqs, engine.max_num_batched_tokens) == (512, 2048)  # splitwise-sim start_state
    assert engine.whole_prompts and not engine.chunked_prefill
    assert engine.mixed_pool == "dynamic" and engine.mixed_prompt_queue_tokens == 8192
    assert engine.kv_link_per_gpu and cfg.system.mixed_instances == 0


def test_full_budget_buys_the_papers_clusters(machines):
    power, cost = 40 * machines["h100_80gb"].power_kw, 40 * machines["h100_80gb"].cost_usd_hr
    assert enumerate_candidates(baseline("a100_80gb"), machines, "power", power)[0].counts == {"colocated": 70}
    assert enumerate_candidates(baseline("a100_80gb"), machines, "cost", cost)[0].counts == {"colocated": 86}
    assert enumerate_candidates(baseline("h100_80gb"), machines, "cost", cost)[0].counts == {"colocated": 40}


def test_preset_kv_link_is_per_gpu():
    cfg = compose_variant([PRESET, "system=splitwise", "system.prefill_instances=1", "system.decode_instances=1"])
    setup = SimulatedDeployment(cfg).setup()
    assert setup.kv_link_per_gpu and setup.mixed_pool == "dynamic" and setup.whole_prompts
    nic = Simulation(setup).nics[0].spec
    assert nic.bandwidth_gbps == pytest.approx(8 * 200 / 8)  # 8 GPUs x 200 Gbps = 200 GB/s per DGX-A100
