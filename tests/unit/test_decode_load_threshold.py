"""``engine.decode_load_threshold``: the average TBT ratio above which the decode pool counts as overloaded, read
by the scheduler's early and predictive admission, by the simulator's decode-stage (baseline) check and by the
real router; checked when the config is composed; 1 (the TBT SLO itself) by default."""

from __future__ import annotations

import math

import pytest

from systems.policies.pd import (
    DecodeView,
    PDScheduler,
    PrefillView,
    check_decode_load_threshold,
    decode_overloaded,
)
from systems.sim.deployment_setup import DeploymentSetup, PoolSetup
from systems.sim.simulation import Simulation
from tests.unit.test_policies_pd import FakeView
from tests.unit.test_sim_simulation import HW, LINK, SHAPE, LinearPerf, spec
from vocab.errors import ConfigError
from vocab.records import RequestSpec, RequestStatus

# two decode instances at estimated steps of 80 and 100 ms against a 100 ms TBT SLO: an average TBT ratio of 0.9
DECODES = [DecodeView("D0", 10, 10_000, 0.08, 0.08, 10_000), DecodeView("D1", 10, 10_000, 0.10, 0.10, 10_000)]


def test_the_threshold_decides_whether_the_decode_pool_is_overloaded() -> None:
    assert not decode_overloaded(DECODES, 0.1)  # 0.9 <= 1, the default
    assert decode_overloaded(DECODES, 0.1, threshold=0.85)
    assert not decode_overloaded(DECODES, 0.1, threshold=0.9)  # not above it
    full = [DecodeView("D0", 10, -1, 0.01, 0.01, -1)]
    assert decode_overloaded(full, 0.1, threshold=5.0)  # no KV room anywhere, whatever the threshold


@pytest.mark.parametrize("mode", ["early", "predictive"])
def test_the_threshold_changes_the_admission_decision(mode: str) -> None:
    view = FakeView([PrefillView("P0", 0.0, 0, 0)], decodes=DECODES)
    admitted = PDScheduler("conductor", rejection=mode, tbt_slo_s=0.1).choose(1000, view)
    assert admitted.reject == ""
    strict = PDScheduler("conductor", rejection=mode, tbt_slo_s=0.1, decode_load_threshold=0.8)
    rejected = strict.choose(1000, view)
    assert "average TBT ratio 0.90 > 0.8" in rejected.reject
    assert (rejected.prefill, rejected.decode) == (admitted.prefill, admitted.decode)  # only admission changes
    assert strict.describe()["decode_load_threshold"] == 0.8


@pytest.mark.parametrize("bad", [0.0, -0.5, math.nan, math.inf])
def test_a_threshold_that_is_not_a_positive_number_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="decode_load_threshold must be a finite number > 0"):
        PDScheduler("conductor", decode_load_threshold=bad)
    with pytest.raises(ValueError, match="decode_load_threshold"):
        check_decode_load_threshold(bad)


@pytest.mark.parametrize("engine", ["sim", "vllm"])
def test_the_engine_option_is_checked_when_composed(compose, engine: str) -> None:
    base = ["system=mooncake", f"engine={engine}"]
    assert compose(base).engine.decode_load_threshold == 1.0
    assert compose([*base, "engine.decode_load_threshold=0.7"]).engine.decode_load_threshold == 0.7
    for bad in ("0", "-1", "nan"):
        with pytest.raises(ConfigError, match=r"engine\.decode_load_threshold: must be a finite number > 0"):
            compose([*base, f"engine.decode_load_threshold={bad}"])


def test_the_simulated_deployment_hands_the_threshold_to_the_scheduler_and_the_decode_stage(compose) -> None:
    from systems.sim.simulated_deployment import SimulatedDeployment, build_setup

    cfg = compose(["experiment=mooncake_rejection", "engine.rejection=baseline", "engine.decode_load_threshold=0.6"])
    deployment = SimulatedDeployment(cfg)
    setup = build_setup(cfg, deployment.plans, deployment.perf)
    assert setup.decode_load_threshold == 0.6
    assert setup.scheduler is not None and setup.scheduler.decode_load_threshold == 0.6


def _baseline(threshold: float | None) -> DeploymentSetup:
    perf = LinearPerf()
    kw = {} if threshold is None else {"decode_load_threshold": threshold}
    sched = PDScheduler("load_balancing", rejection="baseline", tbt_slo_s=0.06, **kw)
    return DeploymentSetup("mooncake", (PoolSetup("prefill", 1, SHAPE, perf, HW), PoolSetup("decode", 1, SHAPE, perf, HW)),
                           LINK, scheduler=sched, rejection="baseline", tbt_slo_s=0.06, **kw)


def _steady(n: int = 60) -> list[RequestSpec]:
    """One 500-token prompt a second, 300 tokens out: a few sequences decode at once, steps of about 10 ms,
    an average TBT ratio of about 0.15-0.2 against the 60 ms TBT SLO."""
    return [spec(i, i * 1.0, 500, 300) for i in range(n)]


def test_the_simulators_decode_stage_check_reads_the_threshold() -> None:
    after = {}
    for threshold in (None, 1.0, 0.15, 0.1):
        sim = Simulation(_baseline(threshold)).run(_steady())
        records = [r.to_record() for r in sim.requests]
        assert all(r.status in (RequestStatus.OK, RequestStatus.REJECTED) for r in records)
        after[threshold] = sim.info.get("n_rejected_after_prefill", 0)
        assert after[threshold] == sum(r.status == RequestStatus.REJECTED for r in records)  # no TTFT SLO here
        assert sim.info["wasted_prefill_tokens"] == 500 * after[threshold]  # each one's prefill was computed
    assert after[None] == after[1.0] == 0  # the default is 1: this load is far below the TBT SLO
    assert 0 < after[0.15] < after[0.1] == 60  # at 0.1 every request's decode stage finds the pool overloaded


def test_the_real_router_reads_the_threshold() -> None:
    from systems.router.pd_app import PDRouter, RouterConfig

    base = {"prefill": [{"name": "p0", "url": "http://127.0.0.1:1"}], "decode": [{"name": "d0", "url": "http://127.0.0.1:2"}],
            "rejection": "early", "tbt_slo_s": 0.1}
    assert PDRouter(RouterConfig.from_json(base)).scheduler.decode_load_threshold == 1.0
    router = PDRouter(RouterConfig.from_json({**base, "decode_load_threshold": 0.75}))
    assert router.scheduler.decode_load_threshold == 0.75
    with pytest.raises(ValueError, match="decode_load_threshold"):
        PDRouter(RouterConfig.from_json({**base, "decode_load_threshold": 0}))
