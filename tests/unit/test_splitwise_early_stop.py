"""Stopping a Splitwise probe once it has provably failed (``study.params.early_stop``): the simulator's stop
hook, the rule's percentile arithmetic, and the same verdicts and tables as whole simulations."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from harness.results import RunFolder
from harness.studies.simulate import simulate
from harness.studies.splitwise_provisioning import run_splitwise_provisioning
from harness.studies.splitwise_provisioning.early_stop import SlowdownStop, _Bound
from harness.studies.splitwise_provisioning.params import ProvisioningParams
from harness.studies.splitwise_provisioning.search import ProvisioningRun, TracePlan
from harness.studies.splitwise_provisioning.slowdown import reference_model
from harness.studies.splitwise_provisioning.study import at_rate, unit_rate_requests
from harness.studies.variants import compose_variant
from systems.sim.simulated_deployment import SimulatedDeployment
from vocab.errors import ConfigError
from vocab.records import RequestStatus

PRESET = "experiment=splitwise_provisioning"
ONE_PAIR = [PRESET, "workload=azure_conv", "system=splitwise", "system.prefill_instances=1",
            "system.decode_instances=1", "engine.token_phase_timing=splitwise_sim"]


@pytest.fixture(scope="module")
def pair():
    cfg = compose_variant(ONE_PAIR)
    params = ProvisioningParams.from_mapping({})
    plan = TracePlan("azure_conv", [], unit_rate_requests(cfg, 300), reference_model(cfg, params))
    return SimulatedDeployment(cfg), plan, params


# --- the rule's arithmetic ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(30))
def test_a_decided_percentile_is_above_its_bound(seed):
    """Whenever the rule says a percentile is decided, numpy's percentile of the final values is above the
    bound; and with every request above it, it decides."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    q = float(rng.choice([50.0, 90.0, 99.0, 99.9, 100.0]))
    bound = 2.0
    slowdown = rng.choice([0.5, 1.9, 2.0, 2.1, 40.0], size=n, p=[0.3, 0.2, 0.1, 0.2, 0.2])
    deadlines = np.arange(n, dtype=float)  # a request's time is deadline x slowdown / bound
    requests = [SimpleNamespace(first_token_s=d * s / bound + (s > bound) * 1e-6) for d, s in
                zip(deadlines, slowdown, strict=True)]
    rule = _Bound("ttft", q, bound, deadlines, np.ones(n, dtype=bool), n)
    decided = rule.advance(math.inf, requests)
    assert rule.above == int((slowdown > bound).sum())
    if decided:
        assert np.percentile(slowdown, q) > bound
    everyone = _Bound("ttft", q, bound, deadlines, np.ones(n, dtype=bool), n)
    assert everyone.advance(math.inf, [SimpleNamespace(first_token_s=math.nan)] * n)  # none came: all above


def test_the_rule_reads_each_request_once_per_bound_and_only_past_its_deadline():
    seen = []

    class Spy:
        def __init__(self, i):
            self.i = i

        @property
        def first_token_s(self):
            seen.append(self.i)
            return math.nan

    deadlines = np.array([5.0, 1.0, 3.0, 9.0, 2.0])
    rule = _Bound("ttft", 50.0, 2.0, deadlines, np.array([True, True, True, True, False]), 5)
    assert rule.needed == 4  # n - floor(0.5 x 4) + 1 (one rank of margin)
    requests = [Spy(i) for i in range(5)]
    assert not rule.advance(2.0, requests) and seen == [1]  # only the deadline before 2 s
    rule.advance(4.0, requests)
    rule.advance(4.0, requests)
    assert seen == [1, 2]  # once each; request 4 is not eligible and never read
    assert not rule.advance(6.0, requests) and seen == [1, 2, 0] and rule.above == 3
    assert rule.advance(9.5, requests) and seen == [1, 2, 0, 3]


# --- the simulator's stop hook -----------------------------------------------------------------------


class StopAt:
    def __init__(self, at_s: float, interval_s: float):
        self.at_s, self.interval_s, self.calls = at_s, interval_s, []

    def __call__(self, now, requests):
        self.calls.append(now)
        return "enough" if now >= self.at_s else None


def test_a_rule_that_never_stops_changes_nothing(pair):
    deployment, plan, _ = pair
    requests = at_rate(plan.requests, 2.0)
    _, whole = deployment.run(requests.specs)
    never = StopAt(math.inf, 3.7)
    _, checked = deployment.run(requests.specs, stop=never)
    assert checked.records() == whole.records() and never.calls
    assert "stopped_early" not in checked.info and checked.info == whole.info


def test_a_stopped_run_keeps_what_happened_before_and_says_why(pair):
    deployment, plan, _ = pair
    requests = at_rate(plan.requests, 2.0)
    _, whole = deployment.run(requests.specs)
    _, cut = deployment.run(requests.specs, stop=StopAt(40.0, 10.0))
    assert cut.info["stopped_early"] == "enough" and cut.info["stopped_at_s"] == 40.0
    done = unfinished = 0
    for full, part in zip(whole.records(), cut.records(), strict=True):
        if part.status == RequestStatus.UNFINISHED:
            unfinished += 1
            assert "stopped early at 40 s: enough" in part.error
            assert not full.finish_s <= 40.0
        else:
            done += 1
            assert part == full and full.finish_s <= 40.0
    assert done and unfinished


def test_a_bad_interval_is_named(pair):
    deployment, plan, _ = pair
    with pytest.raises(ValueError, match="interval_s must be a finite time > 0"):
        deployment.run(at_rate(plan.requests, 2.0).specs, stop=StopAt(1.0, 0.0))


# --- verdicts and tables -----------------------------------------------------------------------------


def test_probes_get_the_whole_runs_verdict(pair):
    deployment, plan, params = pair
    on, off = ProvisioningRun(params, {}), ProvisioningRun(dataclasses.replace(params, early_stop=False), {})
    stopped = passed = 0
    for rate in (0.2, 0.5, 1.0, 2.0, 4.0, 8.0):
        ok_on, probe_on = on.evaluate(deployment, plan, rate)
        ok_off, probe_off = off.evaluate(deployment, plan, rate)
        assert ok_on == ok_off, rate
        if probe_on.row["stopped_early"]:
            stopped += 1
            assert not ok_on and "cannot hold" in probe_on.row["stopped_early"]
            assert probe_on.row["stopped_at_s"] < max(s.arrival_s for s in at_rate(plan.requests, rate).specs) * 3
            assert "p99_ttft_slowdown" not in probe_on.row  # a partial run's percentiles describe nothing
        else:
            assert probe_on.row == {**probe_off.row, "sim_wall_s": probe_on.row["sim_wall_s"]}
            passed += ok_on
    assert stopped and passed


def test_the_rule_is_built_from_the_probes_own_requests(pair):
    _, plan, params = pair
    requests = at_rate(plan.requests, 4.0)
    rule = SlowdownStop(requests, plan.reference, params)
    assert len(rule.bounds) == 6  # TTFT and E2E at p50, p90, p99 (TBT waits for the end of the run)
    assert rule.interval_s == pytest.approx(max(s.arrival_s for s in requests.specs) / 100)
    assert {b.needed for b in rule.bounds} == {300 - math.floor(q / 100 * 299) + 1 for q in (50, 90, 99)}


def test_study_tables_are_the_same_with_and_without_early_stop(tmp_path):
    cfg = compose_variant([PRESET, "study.max_requests=120"])
    variants = {"baseline_a100": [PRESET, "system=vllm_baseline", "engine.colocated.hardware=a100_80gb"],
                "splitwise_aa": [PRESET, "system=splitwise", "engine.prefill.hardware=a100_80gb",
                                 "engine.decode.hardware=a100_80gb"]}
    tables, probes = {}, {}
    for flag in (True, False):
        params = {"traces": ["azure_conv"], "budgets": ["power"], "budget_machines": 3, "budget_hardware": "h100_80gb",
                  "early_stop": flag}
        run_cfg = dataclasses.replace(cfg, study=dataclasses.replace(cfg.study, variants=variants, params=params))
        folder = tmp_path / str(flag)
        run_splitwise_provisioning(run_cfg, RunFolder(folder))
        tables[flag] = pd.read_csv(folder / "study.csv").drop(columns=["at_max_sim_wall_s"])
        probes[flag] = pd.read_csv(folder / "probes.csv")
    pd.testing.assert_frame_equal(tables[True], tables[False])
    assert probes[True][["design", "split", "rate_rps", "passes"]].equals(
        probes[False][["design", "split", "rate_rps", "passes"]])
    assert probes[True]["stopped_early"].notna().any() and probes[False]["stopped_early"].isna().all()


def test_early_stop_must_be_a_flag():
    with pytest.raises(ConfigError, match="study.params.early_stop: expected true or false"):
        ProvisioningParams.from_mapping({"early_stop": "yes"})


def test_a_points_summary_comes_from_columns_equal_to_its_records(pair):
    """``simulate`` summarises columns gathered from the requests; the records, made on first use, read back into
    the same columns and summary."""
    from harness.metrics import extract_columns, request_frame, summarize

    deployment, plan, _ = pair
    point = simulate(deployment, at_rate(plan.requests, 1.0))
    _, run = deployment.run(at_rate(plan.requests, 1.0).specs)
    assert point.columns is not None and len(point.records) == 300
    assert tuple(point.records) == run.records()
    pd.testing.assert_frame_equal(request_frame(point.columns), request_frame(extract_columns(run.records())))
    assert point.metrics == summarize(run.records(), deployment.cfg.slo, n_gpus=point.info["n_gpus"])
