"""``job=sim_study study.kind=splitwise_provisioning``: Splitwise's (ISCA'24, arXiv 2311.18677) throughput
per cost and per watt. For an iso-cost and an iso-power budget, every design gets the machines the budget
buys, each candidate machine split is bisected for the highest Poisson request rate that meets the SLO,
and the best candidate per design is reported with its cost, power and throughput per $/hr and per kW.

**Designs** are ``study.variants`` (label -> Hydra overrides), e.g. ``baseline_a100`` (``system=vllm_baseline``,
``engine.colocated.hardware=a100_80gb``) or ``splitwise_ha`` (``system=splitwise``, prompt pool
``engine.prefill.hardware=h100_80gb``, token pool ``engine.decode.hardware=a100_80gb``). A *machine* is one
instance of ``gpus_per_machine`` GPUs (a DGX: Llama-2-70B at TP 8, ``engine.perf_model=splitwise``): each
pool's ``tp x pp`` must equal it. A design's ``system.mixed_instances`` (a dedicated mixed pool) is kept
fixed and paid for; the prompt:token split (or the colocated count) is what the study enumerates. The presets
use the paper's dynamic mixed pool instead (``engine.mixed_pool=dynamic``: prompt and token machines lent
across pools, nothing extra to pay for; :mod:`systems.sim.simulation`). Every candidate
is the job's own overrides plus ``workload=<trace>``, the design's overrides and ``system.<role>_instances=<n>``
(the ``overrides`` column holds all but the job's own), so it can be rerun on its own with ``job=serve``.

**Cost and power** per machine are ``gpus_per_machine x`` the hardware YAML's ``price_per_hour_usd`` and
``power_w``: $17.6/hr and 3.2 kW per DGX-A100, $38/hr and 5.6 kW per DGX-H100, $38/hr and 3.92 kW per
power-capped DGX-H100 (Splitwise Table I: 400 W / 700 W per GPU, $17.6 / $38 per machine-hour; HHcap caps
token machines at 70% power). The GPU-TDP basis is the one Splitwise's provisioning uses: its iso-power
cluster pairs 70 DGX-A100 with 40 DGX-H100 (70 x 3.2 kW = 40 x 5.6 kW; splitwise-sim's notebooks use a
44 : 24.8 H100 : A100 power ratio, 1.77), whereas splitwise-sim's SKU TDPs (6,500 / 10,200 / 7,140 W)
give 455 kW against 408 kW. ``params.machine_power_w`` replaces it per hardware (e.g. the SKU TDPs).

**Budgets**: ``budget_machines`` machines of ``budget_hardware`` (their cost for ``cost``, their power for
``power``); the paper's is 40 DGX-H100 (224 kW = 70 DGX-A100; $1,520/hr = 86 DGX-A100). Baselines get as many
machines as fit; Splitwise designs get every Pareto-maximal (prompt, token) split that fits (one more machine
of either pool would not), thinned evenly to at most ``max_splits``. A design that cannot afford one machine
per pool gets an infeasible row.

**SLO** (``params.criterion``):

- ``splitwise_slowdown`` (default; Splitwise Table VI, splitwise-sim ``notebooks/plots.ipynb``): per-request
  slowdowns against the same request served alone on ``reference_hardware`` (DGX-A100, TP 8) must have
  p50/p90/p99 of at most 2/3/6 (TTFT) and 1.25/1.5/5 (TBT and E2E); all nine must hold. The uncontended
  latencies come from the reference pool's performance model: TTFT = one prefill of the whole prompt;
  TBT = one batch-1 decode step at the request's mean context (prompt + output / 2; splitwise-sim indexes
  its token time by the prompt size); E2E = TTFT + TBT x (output - 1). A request's TBT is its mean token
  interval (TPOT; undefined for one output token, then left out of the TBT percentiles). Failed, rejected
  and unfinished requests count as a slowdown of 1e9.
- ``attainment``: ``slo_attainment`` under the composed ``slo`` group must reach ``slo.attainment_target``.

**Rates**: the first ``study.max_requests`` requests of the trace (all of them when null: Azure LLM
inference 2023 lengths, capped to the model context) with Poisson arrivals (``workload.arrival.seed``). The
rate-1 schedule is built once per trace and scaled by 1/rate (exactly what ``point_workload`` composes,
tested), so every rate sees the same arrival pattern. A design's candidates are searched from the middle of
the split range outwards (:mod:`.search`): the first brackets from ``initial_rate_per_machine_rps x
machines`` by doubling or halving (``max_expand`` times), then bisects (``bisect_steps`` times, stopping once
the bracket is within ``rate_rel_tol``; :func:`harness.capacity.search_max_rate`, arithmetic). With
``prune_dominated`` each later candidate is probed first at the best rate of its design so far: failing
there, it cannot be chosen and is not searched further (``pruned``, empty ``max_rate_rps``); passing, the
search climbs in steps of ``refine_growth``. ``max_rate_rps`` is the highest passing rate and
``rate_upper_rps`` the lowest failing one. A short prefix reaches steady state only roughly: near capacity
it overstates the sustainable rate; every design is measured the same way.

**Sensitivity** (``scenarios``: name -> overrides, or ``{overrides, traces, budgets, designs}``): after the
main run the study is repeated per scenario with its overrides on every design (e.g.
``engine.token_phase_timing=splitwise_sim``), on the subsets named; ``sensitivity.csv`` holds its rows
(``scenario`` column) with the same choice and ratios.

Writes ``study.csv`` (one row per trace x budget x design x candidate, ``chosen`` marks the best per
trace x budget x design: highest rate, then lower budget use, then fewer machines; ``<x>_vs_<reference_design>``
ratios; ``at_max_*`` the SLO percentiles, latencies and mixed-pool counts at ``max_rate_rps``; a candidate both
budgets buy is bisected once, ``reused`` on its second row), ``probes.csv`` (every simulation of the
searches, all scenarios), ``sensitivity.csv`` (with scenarios) and ``requests.parquet`` (the records of each
chosen candidate at its highest passing rate, simulated again there: the simulation is deterministic). Throughput is the
offered Poisson rate (req/s) the SLO holds at; ``throughput_per_usd_hr`` is req/s per $/hr of machines and
``throughput_per_kw`` req/s per kW of machine power.

The package: :mod:`.params` (``study.params``, checked), :mod:`.machines` (what a budget buys: machine
prices and power, designs, candidate splits), :mod:`.slowdown` (the SLO: slowdowns against an
uncontended run, timed by the same performance model and options as the cluster), :mod:`.search` (the rate
searches of every candidate, pruning), :mod:`.early_stop` (a failed probe stopped once decided) and :mod:`.study`
(planning, choosing, writing the tables).

``study.params`` (defaults in ``params.DEFAULT_PARAMS``): ``traces`` (workload group names), ``budgets``
(``cost``/``power``), ``budget_machines``, ``budget_hardware``, ``gpus_per_machine``, ``machine_power_w``,
``max_splits``, ``bisect_steps``, ``max_expand``, ``initial_rate_per_machine_rps``, ``prune_dominated``,
``refine_growth``, ``rate_rel_tol``, ``criterion``, ``reference_hardware``, ``reference_tp``, ``quantiles``,
``slowdown_bounds``, ``reference_design``, ``scenarios``, ``parallel``, ``parallel_workers`` and ``early_stop``.

**Early stop** (``early_stop``, default true, criterion ``splitwise_slowdown``): a probe's simulation stops as
soon as its TTFT or E2E slowdowns have provably broken a bound (enough requests already past their deadline
without a first token or a finish: :mod:`.early_stop`); its verdict is the whole run's, so every search, layout
and rate is unchanged. Its ``probes.csv`` row says why and when (``stopped_early``, ``stopped_at_s``) and leaves the
percentiles of the partial run empty.

**Parallel searches** (``parallel``: ``auto``, ``none``, ``joblib``, ``ray``, ``slurm``, ``submitit_local``;
``parallel_workers``: null or a cap): each design on each trace (every split of every budget, in every
scenario) is one task of a probe pool (:mod:`harness.probe_pool`); ``auto`` follows the configured Hydra
launcher (joblib processes, Ray tasks, submitit jobs; under the basic launcher joblib on this host's CPUs). The chosen
splits' records are simulated the same way. Results are merged in the in-process order: the tables are the
same wherever the tasks ran, wall-time columns aside (``docs/parallel_probes.md``).
"""

from harness.studies.splitwise_provisioning.study import run_splitwise_provisioning

__all__ = ["run_splitwise_provisioning"]
