"""Times one Splitwise provisioning probe with and without each of the changes that made it cheaper, in one run.

``python -m benchmarks.splitwise_probe_bench [--trace azure_conv] [--repeats 3] [--rates 80 90 96 110 130 172]``

The probes are those of ``splitwise_provisioning_full``'s Splitwise-AA design on one whole Azure hour (40 prompt
and 46 token DGX-A100, the split the iso-cost search starts from; BLOOM-176B with splitwise-sim's token timing),
at the given rates (by default three that pass the SLO and three that fail it). Each variant evaluates every rate
as the study does (``ProvisioningRun.evaluate``: simulate, summarise, judge), the variants taking turns within a
repeat, the order flipped from one repeat to the next. Variants:

- ``shipped``: as the study runs them;
- ``no early stop``: ``study.params.early_stop=false`` (every failing probe simulated to its end);
- ``token table per step``: the splitwise-sim decode step looked up again for every step of a stretch (the
  performance model's generic path) instead of once per batch size;
- ``records before the summary``: the simulation's records made and read back into columns for the summary and
  the slowdowns, instead of the columns gathered from the requests;
- ``before all three``: the three together (the study's probes before these changes).

It prints each variant's median seconds for all the rates, the ratio to ``shipped`` (above 1: shipped is faster),
and checks that every variant gives every rate the same verdict.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from harness.metrics import summarize
from harness.studies import simulate as simulate_module
from harness.studies.splitwise_provisioning import search as search_module
from harness.studies.splitwise_provisioning.params import ProvisioningParams
from harness.studies.splitwise_provisioning.search import ProvisioningRun, TracePlan, unit_rate_requests
from harness.studies.splitwise_provisioning.slowdown import reference_model
from harness.studies.variants import compose_variant
from systems.sim.perf.base import PerfModel
from systems.sim.perf.peer_timing import PeerTimedModel, interp_extrapolate
from systems.sim.simulated_deployment import SimulatedDeployment

DESIGN = ["experiment=splitwise_provisioning_full", "system=splitwise", "engine.prefill.hardware=a100_80gb",
          "engine.decode.hardware=a100_80gb", "engine.kv_link=rdma_200", "system.prefill_instances=40",
          "system.decode_instances=46", "engine.progress=false"]
RATES = (80.0, 86.0, 88.0, 96.0, 110.0, 172.0)


def _step_every_time(self: PeerTimedModel, batch_size: float) -> float:
    assert self.token_table is not None
    return max(float(interp_extrapolate(float(batch_size), *self.token_table)), 0.0) / 1e3


def _simulate_with_records(deployment: Any, requests: Any, slo: Any = None, keep_load: bool = False,
                           stop: Any = None, **changes: Any) -> simulate_module.SimPoint:
    start = time.perf_counter()
    setup, run = deployment.run(requests.specs, stop=stop, **changes)
    records = run.records()
    metrics = summarize(records, slo or deployment.cfg.slo, n_gpus=setup.n_gpus)
    return simulate_module.SimPoint(records, metrics, run.info, [], time.perf_counter() - start)


@contextlib.contextmanager
def token_table_per_step() -> Iterator[None]:
    saved = PeerTimedModel.decode_segment_ends, PeerTimedModel._token_step_s
    PeerTimedModel.decode_segment_ends = PerfModel.decode_segment_ends  # type: ignore[method-assign]
    PeerTimedModel._token_step_s = _step_every_time  # type: ignore[method-assign]
    try:
        yield
    finally:
        PeerTimedModel.decode_segment_ends, PeerTimedModel._token_step_s = saved  # type: ignore[method-assign]


@contextlib.contextmanager
def records_before_summary() -> Iterator[None]:
    saved = search_module.simulate
    search_module.simulate = _simulate_with_records  # type: ignore[assignment]
    try:
        yield
    finally:
        search_module.simulate = saved  # type: ignore[assignment]


def probe_all(deployment: SimulatedDeployment, plan: TracePlan, params: ProvisioningParams,
              rates: Sequence[float]) -> tuple[float, list[bool]]:
    run = ProvisioningRun(params, {})
    start = time.perf_counter()
    verdicts = [run.evaluate(deployment, plan, rate)[0] for rate in rates]
    return time.perf_counter() - start, verdicts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.splitwise_probe_bench",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="azure_conv")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rates", type=float, nargs="+", default=list(RATES))
    args = parser.parse_args(argv)
    cfg = compose_variant([*DESIGN, f"workload={args.trace}"])
    params = ProvisioningParams.from_mapping(cfg.study.params)
    plan = TracePlan(args.trace, [], unit_rate_requests(cfg, None), reference_model(cfg, params))
    deployment = SimulatedDeployment(cfg)
    no_stop = dataclasses.replace(params, early_stop=False)
    nothing: Callable[[], Any] = contextlib.nullcontext

    @contextlib.contextmanager
    def before_all() -> Iterator[None]:
        with token_table_per_step(), records_before_summary():
            yield

    variants: dict[str, tuple[Callable[[], Any], ProvisioningParams]] = {
        "shipped": (nothing, params), "no early stop": (nothing, no_stop),
        "token table per step": (token_table_per_step, params),
        "records before the summary": (records_before_summary, params), "before all three": (before_all, no_stop)}
    print(f"{args.trace}: {len(plan.requests)} requests, 40P/46T Splitwise-AA, rates {args.rates}; "
          f"{args.repeats} repeats", flush=True)
    probe_all(deployment, plan, params, args.rates[:1])  # warm-up: imports, caches
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    verdicts: dict[str, list[bool]] = {}
    for repeat in range(args.repeats):
        names = list(variants) if repeat % 2 == 0 else list(reversed(variants))
        for name in names:
            patch, p = variants[name]
            with patch():
                wall, got = probe_all(deployment, plan, p, args.rates)
            seconds[name].append(wall)
            verdicts.setdefault(name, got)
            if got != verdicts[name] or got != verdicts.get("shipped", got):
                raise SystemExit(f"{name}: verdicts {got} differ from {verdicts.get('shipped')}")
            print(f"  repeat {repeat + 1} {name}: {wall:.2f} s", flush=True)
    shipped = statistics.median(seconds["shipped"])
    print(f"verdicts (every variant): {dict(zip(args.rates, verdicts['shipped'], strict=True))}")
    for name, values in seconds.items():
        median = statistics.median(values)
        print(f"{name:<28} median {median:7.2f} s for {len(args.rates)} probes  ({median / len(args.rates):.3f} s "
              f"a probe)  vs shipped {median / shipped:5.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
