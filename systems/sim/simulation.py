"""A simulated cluster: instances of each role, the router or disaggregation scheduler in front of
them, KV transfers between them and Mooncake's KV-cache pool, driven by one event queue.

Request life cycle:

* colocated systems (``vllm_baseline``): a routing policy from ``systems.policies`` picks an instance,
  which prefills and decodes the request;
* disaggregated systems: a :class:`~systems.policies.pd.PDScheduler` picks the prefill instance and the
  cached prefix to reuse (loading it from node DRAM or the pool first), or rejects the request. When the
  prefill ends the first token is out; the KV moves over the prefill node's link (queued FIFO, optionally
  overlapped layer by layer with the prefill) to the decode instance with the lowest estimated step time
  that has room; Splitwise's mixed pool takes prompts when the prompt pool's queue is long and decodes
  when no token instance has room.

Splitwise's mixed pool comes in two forms (``engine.mixed_pool``):

* ``dedicated``: the ``system.mixed_instances`` run both phases; a prompt goes there when the chosen prompt
  instance's estimated queue exceeds ``mixed_overflow_queue_s``, a decode when no token instance has room.
* ``dynamic``, the paper's (as splitwise-sim's ``MixedPoolScheduler``, ``scheduler.py``, implements it): the
  pool starts empty. When the chosen prompt instance's queue is long (work waits there and its pending
  tokens, prompt tokens queued or computing plus one per sequence decoding, would exceed
  ``mixed_prompt_queue_tokens`` with this prompt), the prompt goes to the mixed pool's least-loaded member
  if that one's queue is not long, else the least-loaded token instance is lent to the mixed pool and
  takes it (and decodes it where it was prefilled, with mixed batching). A decode goes to the token
  instance with the least KV scheduled (in use, reserved by transfers on the way, and this request's) that
  has room, as splitwise-sim's ``find_best_token_instance`` picks by ``sched_memory`` (the ``dedicated`` form
  and the other P/D designs take the one with the fastest estimated step). When no token instance has room
  for a request's KV, it decodes on the mixed pool's member with the least KV in use if that one has
  room, else on a prompt instance lent to the mixed pool (the one with the least KV in use). A lent
  instance goes back to its own pool once it has no work left. Differences from splitwise-sim: it picks
  the token machine of a prompt lent out at arrival (and may ship the KV again), and when every token
  machine is lent it runs both phases on the least-loaded machine; here the prompt stays in the prompt
  pool.

Choices never scan the instances: each pool keeps its instances sorted by the key its choice compares
(:class:`~systems.sim.load_index.SortedPool`), re-keyed lazily (an instance whose load may have changed is
logged by the instance and re-keyed before the next choice), and cache-aware prefill candidates come from
block -> holders bit sets (:class:`~systems.sim.load_index.BlockHolders`). A choice reads the same values
and breaks ties the same way as a scan would, so the decisions are the scan's, in about ``log n`` steps per
request. The decode choice walks the decode instances by their step estimate at the smallest context, a
lower bound of the request's own estimate when the performance model's step time never decreases with the
context (``PerfModel.decode_monotone_in_context``; otherwise it scans). What stays a scan: load samples,
the mean over all decode instances that decode rejection (``baseline``, ``early``, ``predictive``) needs,
and the fallback when no decode instance has room.

The Mooncake pool has three tiers: each instance's HBM prefix cache, its node's DRAM, and every other
node's DRAM (the remote tier, read over ``remote_link``). Each tier evicts LRU. After a prefill the
prompt's blocks are written to the node's DRAM; a block fetched from a remote node ``replication_threshold``
times is copied into the reader's DRAM (hot-block replication).

Load samples (``load.csv``): every instance's queue and KV use every ``sample_interval_s`` of simulated
time, at most :data:`MAX_SAMPLE_TIMES` sampling instants per run whatever its length. The interval starts at
``max(sample_interval_s, last arrival / MAX_SAMPLE_TIMES)``; when the run outlasts that budget, every other
instant is dropped and the interval doubles, so the samples always cover the whole run evenly.
"""

from __future__ import annotations

import logging
import math
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import Any, Optional

from systems.policies.base import IndexedLoads, InstanceLoad, OutstandingIndex, RouteRequest, RoutingPolicy
from systems.policies.block_lru import BlockLRU
from systems.policies.pd import DecodeView, PrefillView, PrefixSource, decode_overloaded
from systems.sim.deployment_setup import DeploymentSetup, SimRun
from systems.sim.events import PRIO_ARRIVAL, PRIO_SAMPLE, PRIO_TRANSFER, EventQueue
from systems.sim.instance import InstanceHooks, SimInstance
from systems.sim.keys import request_keys
from systems.sim.links import FifoLink
from systems.sim.load_index import BatchBuckets, BlockHolders, HeldBlockLRU, SortedPool, iter_bits, run_levels
from systems.sim.request import SimRequest
from systems.sim.stop_rule import StopRule
from systems.topology import ROLES
from vocab.records import RequestSpec, RequestStatus

log = logging.getLogger(__name__)

MAX_SAMPLE_TIMES = 10_000  # load-sampling instants per run (even: halving keeps the instants on one grid)
COST_POLICIES = ("load_balancing", "local_cache_aware", "prefix_match", "conductor")  # prefill choices by cost
FEW_TO_SORT = 16  # a candidate group this small is read member by member instead of walked in key order


class Simulation(InstanceHooks):
    """One simulated deployment; :meth:`run` simulates a list of requests once."""

    def __init__(self, setup: DeploymentSetup) -> None:
        self.setup = setup
        self.loop = EventQueue()
        # the handlers of transfer events, bound once (not a bound method made, and later freed, per transfer)
        self._on_loaded: Callable[[float, tuple[SimInstance, SimRequest, int]], None] = self._loaded
        self._on_transferred: Callable[[float, tuple[SimInstance, SimInstance, SimRequest]], None] = self._transferred
        self.instances: list[SimInstance] = []
        self.by_role: dict[str, list[SimInstance]] = {r: [] for r in ROLES}
        self.nics: list[FifoLink] = []
        self.dram: list[Optional[BlockLRU]] = []
        self._holders: Counter[int] = Counter()  # block -> DRAM caches holding it, of those not in _dram_holders
        self._remote_reads: Counter[int] = Counter()
        pool = setup.kv_pool
        for p in setup.pools:
            for k in range(p.count):
                index = len(self.instances)
                inst = SimInstance(index, f"{p.role[0].upper()}{k}", p.role, p.shape, p.perf, self.loop, self,
                                   setup.max_num_batched_tokens, setup.max_num_seqs,
                                   (setup.chunked_prefill or p.role == "prefill") and not setup.whole_prompts)
                inst.mix_whole = setup.whole_prompts
                inst.role_index = k
                self.instances.append(inst)
                self.by_role[p.role].append(inst)
                self.nics.append(FifoLink(setup.kv_link.aggregate(p.shape.n_gpus) if setup.kv_link_per_gpu
                                          else setup.kv_link))
                self.dram.append(None)
        self.has_pool = pool.dram_tokens_per_node > 0 and pool.remote_link is not None
        # requests get prefix-cache keys (prefix caching or a KV pool), made when a request arrives and dropped when
        # it finishes: a long run holds those of the requests in flight, not one tuple per request
        self._keyed = setup.prefix_caching or self.has_pool
        remote = pool.remote_link
        self.remote_nics = [FifoLink(remote) for _ in self.instances] if self.has_pool and remote is not None else []
        # one-phase clusters, for searches that size each phase on its own (DistServe's placement):
        # prefill-only: requests end at their first token; decode-only: requests arrive with their KV
        self.prefill_only = bool(self.by_role["prefill"]) and not self.by_role["decode"] and not self.by_role["mixed"]
        self.decode_only = bool(self.by_role["decode"]) and not self.by_role["prefill"]
        self.disaggregated = bool(self.by_role["prefill"]) and not self.prefill_only
        if self.disaggregated and setup.scheduler is None:
            raise ValueError("a deployment with prefill and decode instances needs a PDScheduler")
        if not self.disaggregated and not self.decode_only and not self.prefill_only and setup.router is None:
            raise ValueError("a colocated deployment needs a routing policy")
        self.lent: set[int] = set()  # prompt and token instances lent to the dynamic mixed pool (indices)
        self._lent_check: set[int] = set()  # lent instances touched since _return_idle last looked at them
        self._dirty: list[SimInstance] = []  # instances whose load may have changed since the last re-keying
        for inst in self.instances:
            inst.dirty_log = self._dirty
        self._updaters: list[list[Any]] = [[] for _ in self.instances]  # per instance: index re-keying calls
        self._pos = [0] * len(self.instances)  # each instance's position among the instances of its role
        for members in self.by_role.values():
            for k, inst in enumerate(members):
                self._pos[inst.index] = k
        self._route_loads: Optional[IndexedLoads] = None
        self._route_index: Optional[OutstandingIndex] = None  # colocated: outstanding counts by pool position
        router = setup.router  # told of every finish, unless its on_finished does nothing
        self._router_on_finished = not self.disaggregated and router is not None and \
            type(router).on_finished is not RoutingPolicy.on_finished
        self._prefill_queue: Optional[SortedPool] = None  # prefill pool by (queue, [outstanding,] index)
        self._prefill_models: list[int] = []  # bit sets of the prefill instances sharing a performance model
        self._lb_candidates = False  # load_balancing: the least-loaded prefill instance is the only candidate
        self._hbm_holders: Optional[BlockHolders] = None  # prefill pool: block -> instances holding it in HBM
        self._dram_holders: Optional[BlockHolders] = None  # ... in their node's DRAM
        self._decode_room: Optional[SortedPool] = None  # (KV used + pending, index) of the (not lent) decodes
        self._decode_steps: Optional[BatchBuckets] = None  # decodes by batch, then context (one model)
        self._decode_pending: Optional[SortedPool] = None  # dynamic: (pending tokens, index) of non-lent decodes
        self._prefill_kv: Optional[SortedPool] = None  # dynamic: (KV fraction, index) of non-lent prefills
        self._member_kv: Optional[SortedPool] = None  # mixed pool members by (KV fraction, index)
        self._member_pending: Optional[SortedPool] = None  # dynamic: mixed pool members by (pending tokens, index)
        self._mixed_queue: Optional[SortedPool] = None  # dedicated: mixed instances by (queue, outstanding, index)
        kv_capacities = {d.kv_capacity for d in self.by_role["decode"]}
        self._decode_kv_capacity = kv_capacities.pop() if len(kv_capacities) == 1 else None  # when all decodes share one
        self._build_indexes()
        self._current: Optional[SimRequest] = None
        self._memo: dict[tuple[int, int, int], float] = {}
        self._view_instances: list[SimInstance] = []
        self._block_size = 0
        self.requests: list[SimRequest] = []
        self._arrivals: list[SimRequest] = []  # the requests by arrival time (then request order)
        self._ticks: list[tuple[float, list[dict[str, Any]]]] = []  # each sampling instant and its rows
        self._sample_interval_s = setup.sample_interval_s
        self.counters: Counter[str] = Counter()
        self._done = 0
        self._ok = 0  # requests finished (counters["ok"], kept apart: counted on the hot path)
        self._decode_s_sum = 0.0  # decode durations of the requests finished so far (uniform t_d estimate)
        self._decode_s_n = 0
        self.wasted_prefill_tokens = 0  # prompt tokens computed for requests rejected after their prefill
        self._pull = setup.kv_handoff == "pull" and setup.mixed_pool != "dynamic"
        self._parked: deque[tuple[SimInstance, SimRequest]] = deque()  # pull: prefilled, waiting for decode room
        self._inbound = [0] * len(self.instances)  # pull: KV tokens on their way to each instance (room taken)

    # -- load indexes (see the module docstring) ---------------------------------------------------
    def _build_indexes(self) -> None:
        """The indexes the configured choices read; each instance gets the calls that re-key it in them."""
        by_role, setup = self.by_role, self.setup
        prefills, decodes, mixed = by_role["prefill"], by_role["decode"], by_role["mixed"]
        if not self.disaggregated and not self.decode_only and not self.prefill_only:
            pool = by_role["colocated"] or mixed
            index = OutstandingIndex([inst.outstanding for inst in pool])

            def view(k: int) -> InstanceLoad:
                inst = pool[k]
                return InstanceLoad(inst.name, inst.outstanding, inst.queued_tokens)

            # a colocated instance's outstanding count changes only when a request is routed there or ends
            # there (finished or failed): _enqueue_prefill, on_finished and on_failed update the index
            self._route_loads = IndexedLoads(len(pool), view, index)
            self._route_index = index
            return
        scheduler = setup.scheduler
        if self.prefill_only:
            self._prefill_queue = self._pool(_queue_outstanding_key, prefills)
        elif scheduler is not None and scheduler.policy in COST_POLICIES and len(prefills) > 4:
            models: dict[int, int] = {}  # performance model -> bit set of the prefill instances it times
            for inst in prefills:
                models[id(inst.perf)] = models.get(id(inst.perf), 0) | 1 << self._pos[inst.index]
            self._prefill_models = list(models.values())
            self._lb_candidates = scheduler.policy == "load_balancing"
            self._prefill_queue = self._pool(_queue_outstanding_key if self._lb_candidates else _queue_key, prefills)
            if not self._lb_candidates:
                self._hbm_holders, self._dram_holders = BlockHolders(), BlockHolders()
        self._decode_room = self._pool(_room_key, decodes)
        if not self.disaggregated:
            return
        dynamic = setup.mixed_pool == "dynamic"
        everyone = [*prefills, *decodes, *mixed]
        if dynamic:  # lent instances leave the decode / prefill pools for the member pools
            self._decode_pending = self._pool(_pending_key, decodes)
            self._prefill_kv = self._pool(_kv_key, prefills)
            self._member_pending = self._pool(_pending_key, mixed, everyone)
        elif decodes and _one_model(decodes) and decodes[0].perf.decode_monotone_in_context():
            perf = decodes[0].perf

            def bound(batch: int, context: int) -> float:  # the step of a member at the batch's smallest context
                return float(perf.decode_step_time_s(batch + 1, context + 1))

            self._decode_steps = BatchBuckets(_batch_state, bound, decodes)
            for d in decodes:
                self._updaters[d.index].append(self._decode_steps.update)
        if dynamic or mixed:
            self._member_kv = self._pool(_kv_key, mixed, everyone)
        if mixed and not dynamic:
            self._mixed_queue = self._pool(_queue_outstanding_key, mixed)

    def _pool(self, key: Any, members: Sequence[SimInstance],
              watched: Optional[Sequence[SimInstance]] = None) -> SortedPool:
        """A :class:`SortedPool` of ``members``, re-keyed whenever one of ``watched`` (default: the members, the
        instances that may ever join) is touched."""
        pool = SortedPool(key, members)
        for inst in members if watched is None else watched:
            self._updaters[inst.index].append(pool.update)
        return pool

    def _refresh(self) -> None:
        """Re-key the instances touched since the last call (every choice starts with this)."""
        dirty = self._dirty
        if dirty:
            updaters = self._updaters
            lent = self.lent
            for inst in dirty:
                inst.touched = False
                for update in updaters[inst.index]:
                    update(inst)
                if lent and inst.index in lent:
                    self._lent_check.add(inst.index)
            dirty.clear()

    # -- set-up per run ---------------------------------------------------------------------------
    def _size_caches(self, block_size: int) -> None:
        self._block_size = block_size
        pool = self.setup.kv_pool
        hbm_holders, dram_holders = self._hbm_holders, self._dram_holders
        for i, inst in enumerate(self.instances):  # a cache smaller than one block holds nothing: none at all
            tracked = hbm_holders is not None and dram_holders is not None and inst.role == "prefill"
            hbm_blocks = inst.kv_capacity // block_size
            inst.hbm = None
            if self.setup.prefix_caching and hbm_blocks > 0:
                if tracked and hbm_holders is not None:
                    inst.hbm = hbm_holders.cache(self._pos[i], hbm_blocks)
                else:
                    inst.hbm = BlockLRU(hbm_blocks)
            dram_blocks = pool.dram_tokens_per_node // block_size
            if self.has_pool and dram_blocks > 0:
                if tracked and dram_holders is not None:
                    # its blocks are in dram_holders' bit sets: a block is in some DRAM cache when it has bits there
                    # or a count in _holders (the untracked caches)
                    self.dram[i] = dram_holders.cache(self._pos[i], dram_blocks)
                else:
                    self.dram[i] = BlockLRU(dram_blocks, on_evict=self._dram_evicted)

    def _dram_evicted(self, key: int) -> None:
        self._holders[key] -= 1
        if self._holders[key] <= 0:
            del self._holders[key]

    # -- the run ----------------------------------------------------------------------------------
    def run(self, specs: Sequence[RequestSpec], progress: bool = False, stop: Optional[StopRule] = None) -> SimRun:
        """Simulate ``specs`` (arrivals at ``spec.arrival_s``) to completion, or until ``stop`` says the rest
        can be skipped (:mod:`systems.sim.stop_rule`)."""
        block_sizes = {s.block_size for s in specs}
        self._size_caches(max(block_sizes) if block_sizes else 512)
        self.requests = [SimRequest(s, ()) for s in specs]
        last_arrival = 0.0
        for req in self.requests:
            arrival = req.spec.arrival_s
            if not (math.isfinite(arrival) and arrival >= 0):
                raise ValueError(f"request {req.spec.request_id}: arrival_s must be a finite time >= 0, got {arrival!r}")
            if arrival > last_arrival:
                last_arrival = arrival
        # arrivals run in (time, request order), as the queue would order them, and never tie with another event
        # (no other event has their priority): they run as the queue's stream, without going through its heap
        self._arrivals = sorted(self.requests, key=lambda r: r.spec.arrival_s)
        self.loop.set_stream([r.spec.arrival_s for r in self._arrivals], PRIO_ARRIVAL, self._arrive, self._arrivals)
        if self.requests:
            # bounded work whatever the schedule spans: at most MAX_SAMPLE_TIMES instants up to the last arrival
            self._sample_interval_s = max(self.setup.sample_interval_s, last_arrival / MAX_SAMPLE_TIMES)
            self.loop.schedule(0.0, PRIO_SAMPLE, self._sample, None)
        bar = None
        if progress and self.requests:
            from tqdm import tqdm

            bar = tqdm(total=len(self.requests), unit="req", desc="simulating", mininterval=1.0, leave=False)

        def on_progress(_: float) -> None:
            if bar is not None:
                bar.update(self._done - bar.n)

        if stop is None:
            self.loop.run(on_progress=on_progress if bar is not None else None)
            stopped, stopped_at = "", self.loop.now
        else:
            stopped, stopped_at = self._run_checked(stop, on_progress if bar is not None else None)
        if bar is not None:
            bar.update(self._done - bar.n)
            bar.close()
        if stopped:
            for req in self.requests:
                if req.status == RequestStatus.UNFINISHED:
                    req.error = f"simulation stopped early at {stopped_at:.6g} s: {stopped}"
            info = self._info()
            info["stopped_early"], info["stopped_at_s"] = stopped, stopped_at
            return SimRun(self.requests, self.samples, info)
        stuck = len(self.requests) - self._done
        if stuck:
            log.warning("%d requests never finished: no event was left to move them (see status 'unfinished')", stuck)
            for req in self.requests:
                if req.status == RequestStatus.UNFINISHED and not req.error:
                    req.error = "still queued when the simulation ran out of events"
        return SimRun(self.requests, self.samples, self._info())

    def _run_checked(self, stop: StopRule, on_progress: Optional[Callable[[float], None]]) -> tuple[str, float]:
        """Run the events ``stop.interval_s`` simulated seconds at a time (the same events in the same order as
        one run), asking ``stop`` after each stretch; its reason and the instant when it stopped the run, else
        ``("", end)``."""
        interval = float(stop.interval_s)
        if not (math.isfinite(interval) and interval > 0):
            raise ValueError(f"stop rule: interval_s must be a finite time > 0, got {interval!r}")
        k = 1
        while len(self.loop):
            until = k * interval
            self.loop.run(until=until, on_progress=on_progress)
            if self._done < len(self.requests):
                reason = stop(until, self.requests)
                if reason:
                    return reason, until
            k += 1
        return "", self.loop.now

    @property
    def samples(self) -> list[dict[str, Any]]:
        """The load samples so far, one row per instance and sampling instant."""
        return [row for _, rows in self._ticks for row in rows]

    def _info(self) -> dict[str, Any]:
        insts = self.instances
        last: Any = None  # the latest finish (the first of equal ones, as max() picks)
        prompt = cached = fetched = 0
        rejected = RequestStatus.REJECTED
        for r in self.requests:  # one pass
            f = r.finish_s
            if f == f and (last is None or f > last):
                last = f
            if r.status != rejected:
                prompt += r.prompt
                cached += r.cached_tokens  # as prompt
            fetched += r.fetched_tokens
        end = 0.0 if last is None else last
        info: dict[str, Any] = {
            "n_instances": len(insts), "n_gpus": self.setup.n_gpus, "events": self.loop.processed,
            "simulated_s": end, "prefill_tokens_computed": sum(i.prefill_tokens_computed for i in insts),
            "prompt_tokens_admitted": prompt, "prefix_reused_tokens": cached,
            "prefix_hit_rate_tokens": cached / prompt if prompt else math.nan,
            "kv_transfer_bytes": sum(n.bytes_moved for n in self.nics),
            "pool_fetched_tokens": fetched,
            "preemptions": sum(i.preemptions for i in insts),
            "wasted_prefill_tokens": self.wasted_prefill_tokens,
            "load_sample_interval_s": self._sample_interval_s, "load_sample_times": len(self._ticks),
            **{f"n_{k}": v for k, v in sorted((self.counters + Counter(ok=self._ok)).items())},
        }
        for role, members in self.by_role.items():
            if members:
                info[f"busy_s_{role}"] = sum(i.busy_s for i in members)  # instance-seconds spent in iterations
            if members and end > 0:
                info[f"utilization_{role}"] = sum(i.busy_s for i in members) / (len(members) * end)
        return info

    def _sample(self, now: float, _: Any) -> None:
        rows: list[dict[str, Any]] = []
        self._ticks.append((now, rows))
        for inst in self.instances:
            rows.append({
                "time_s": now, "instance": inst.name, "role": inst.role, "running": len(inst.running),
                "waiting": len(inst.waiting) + len(inst.prefilling) + len(inst.pending), "queued_prefill_s": inst.queued_work_s,
                "kv_utilization": inst.kv_used / inst.kv_capacity if inst.kv_capacity else math.nan,
                "step_s": inst.step_estimate_s() if inst.role != "prefill" else math.nan,
            })
        if self._done < len(self.requests) and len(self.loop):  # stop when nothing else can happen
            if len(self._ticks) >= MAX_SAMPLE_TIMES:
                self._thin_samples()
            start = self._ticks[0][0]
            nxt = start + len(self._ticks) * self._sample_interval_s
            while not nxt > now:  # float resolution at huge times: widen until the clock moves
                self._thin_samples()
                nxt = start + len(self._ticks) * self._sample_interval_s
            self.loop.schedule(nxt, PRIO_SAMPLE, self._sample, None)

    def _thin_samples(self) -> None:
        """Keep every other sampling instant (the 1st, 3rd, ...) and double the interval."""
        self._ticks = self._ticks[::2]
        self._sample_interval_s *= 2

    # -- arrivals ---------------------------------------------------------------------------------
    def _fail(self, req: SimRequest, now: float, reason: str, status: RequestStatus = RequestStatus.FAILED) -> None:
        req.status = status
        req.error = reason
        req.finish_s = now
        self.counters[status.value] += 1
        self._done += 1

    def _arrive(self, now: float, req: SimRequest) -> None:
        limit = self.setup.max_model_len
        if limit is not None and req.prompt + req.out_len > limit:
            self._fail(req, now, f"prompt + output ({req.prompt} + {req.out_len} tokens) exceeds model.max_model_len {limit}")
            return
        if self._keyed:
            req.keys = request_keys(req.spec)
        if self.disaggregated:
            self._arrive_disaggregated(now, req)
            return
        if self.decode_only or self.prefill_only:
            self._arrive_one_phase(now, req)
            return
        insts = self.by_role["colocated"] or self.by_role["mixed"]
        loads = self._route_loads
        assert loads is not None
        route = RouteRequest(req.spec.request_id, req.keys, req.prompt, req.spec.tenant)
        router = self.setup.router
        assert router is not None
        index = router.choose(route, loads)
        router.on_routed(route, index)
        self._enqueue_prefill(insts[index], req, now, 0)

    def _arrive_one_phase(self, now: float, req: SimRequest) -> None:
        """Least-loaded instance of the only phase; decode-only requests come with KV and a first token."""
        self._refresh()
        if self.prefill_only:
            inst = self._first(self._prefill_queue)
            self._enqueue_prefill(inst, req, now, 0)
            return
        inst = self._first(self._decode_room)
        req.prefill_instance = ""
        req.first_token_s = req.prefill_start_s = req.prefill_end_s = now
        req.token_times.append(now)
        req.generated = 1
        if req.generated >= req.out_len:
            self._finish_without_decode(inst, req, now)
            return
        inst.enqueue_decode(req, now)

    def _enqueue_prefill(self, inst: SimInstance, req: SimRequest, now: float, reuse: int) -> None:
        cached = self._hbm_tokens(inst, req)
        if reuse > cached:
            cached = reuse
        if cached > req.prompt - 1:
            cached = req.prompt - 1
        req.est_work_s = inst.prefill_estimate_s(req.prompt - cached, float(req.prompt) ** 2 - float(cached) ** 2)
        req.cached_tokens = reuse
        inst.enqueue_prefill(req, now)
        if self._route_index is not None:
            self._route_index.set(self._pos[inst.index], inst.outstanding)

    def _hbm_tokens(self, inst: SimInstance, req: SimRequest) -> int:
        if inst.hbm is None or not req.keys:
            return 0
        return inst.hbm.prefix_len(req.keys) * req.spec.block_size

    # -- disaggregated: the scheduler's view ------------------------------------------------------
    def prefill_views(self) -> Sequence[PrefillView]:
        req = self._current
        assert req is not None
        if self._prefill_queue is None:  # every prefill instance is a candidate
            pool = self.by_role["prefill"]
            self._view_instances = pool
            return _PrefillViews(self, pool, req)
        candidates = self._candidates(req)
        self._view_instances = [inst for inst, _ in candidates]
        return [PrefillView(i.name, i.queued_work_s, local, i.outstanding) for i, local in candidates]

    def _candidates(self, req: SimRequest) -> list[tuple[SimInstance, int]]:
        """(instance, local prefix tokens) of the prefill instances worth scoring for ``req``, in order.

        Instances of one pool (one performance model) that hold the same length of the request's prefix, with
        the same part of it in HBM, differ only in their queue, so only the one the policy could pick among
        them is scored: the shortest queue, then, for load_balancing, the fewest outstanding, then the lowest
        index (the policies' own tie-breaks). For load_balancing that is the least-loaded instance overall.
        The groups come from the holder bit sets, each group's best from the pool sorted by those keys."""
        self._refresh()
        queue = self._prefill_queue
        assert queue is not None
        first = queue.first()
        assert first is not None
        keys = req.keys
        models = self._prefill_models
        if self._lb_candidates or (len(models) == 1 and not keys):
            best = self.instances[first[-1]]
            return [(best, self._local_tokens(best, req))]
        assert self._hbm_holders is not None and self._dram_holders is not None
        hbm = self._hbm_holders.bits
        full = (1 << len(self.by_role["prefill"])) - 1
        in_hbm = run_levels(keys, full, hbm)
        bs = req.spec.block_size
        out = []
        for run, members in run_levels(keys, full, hbm, self._dram_holders.bits):  # local: HBM or node DRAM
            for _, part in in_hbm:
                for model in models:
                    group = members & part & model
                    if group:
                        out.append((self._best_of(group), run * bs))
                        members ^= group
                if not members:
                    break
        out.sort(key=lambda c: c[0].index)
        return out

    def _best_of(self, group: int) -> SimInstance:
        """The prefill instance of bit set ``group`` (pool positions) that comes first in ``_prefill_queue``."""
        queue = self._prefill_queue
        assert queue is not None
        pool = self.by_role["prefill"]
        if group.bit_count() <= FEW_TO_SORT:
            return min((pool[p] for p in iter_bits(group)), key=queue.key)
        pos, instances = self._pos, self.instances
        for entry in queue:
            if group >> pos[entry[-1]] & 1:
                return instances[entry[-1]]
        raise AssertionError("a group of prefill instances outside the prefill pool")

    def _prefill_pool(self) -> list[SimInstance]:
        """The instances ``prefill_views`` last described (view index -> instance)."""
        return self._view_instances

    def _local_tokens(self, inst: SimInstance, req: SimRequest) -> int:
        keys = req.keys
        if not keys:
            return 0
        hbm = inst.hbm
        dram = self.dram[inst.index]
        k = hbm.prefix_len(keys) if hbm is not None else 0
        if dram is not None:
            n = len(keys)
            while k < n and (keys[k] in dram or (hbm is not None and keys[k] in hbm)):
                k += 1
        return k * req.spec.block_size

    def global_prefix(self) -> PrefixSource:
        req = self._current
        assert req is not None
        if not self.has_pool or not req.keys:
            return PrefixSource(0, "")
        holders = self._holders
        bits = self._dram_holders.bits if self._dram_holders is not None else {}
        k = 0
        for key in req.keys:
            if key not in bits and holders.get(key, 0) <= 0:  # in no DRAM cache
                break
            k += 1
        return PrefixSource(k * req.spec.block_size, "pool" if k else "")

    def prefill_time_s(self, index: int, prompt_tokens: int, cached_tokens: int) -> float:
        perf = self._prefill_pool()[index].perf
        cached = min(cached_tokens, prompt_tokens - 1)
        key = (id(perf), prompt_tokens, cached)  # instances of a pool share one model: one call per decision
        value = self._memo.get(key)
        if value is None:
            value = float(perf.prefill_time_s(prompt_tokens - cached, float(prompt_tokens) ** 2 - float(cached) ** 2, 1))
            self._memo[key] = value
        return value

    def load_time_s(self, index: int, local_tokens: int, fetched_tokens: int) -> float:
        inst = self._prefill_pool()[index]
        req = self._current
        assert req is not None
        per_token = inst.perf.kv_bytes_per_token
        from_dram = max(local_tokens - self._hbm_tokens(inst, req), 0) + fetched_tokens
        t = from_dram * per_token / (self.setup.kv_pool.dram_bandwidth_gbps * 1e9)
        if fetched_tokens > 0 and self.setup.kv_pool.remote_link is not None:
            t += self.setup.kv_pool.remote_link.transfer_time_s(fetched_tokens * per_token)
        return t

    def decode_views(self, prompt_tokens: int, after_s: float) -> list[DecodeView]:
        """Every decode instance with the request added; with ``after_s > 0`` also its load predicted for
        ``t = now + after_s``, Mooncake's system-level prediction (arXiv 2407.00079 v3, §7): from the load
        seen now, the requests the prefill instances will have finished by ``t`` join (spread evenly over the
        decode instances), and the running requests whose decode, assumed to last the uniform ``t_d``, ends
        within ``(now, t]`` leave. ``t_d`` is the mean decode time of the requests finished so far (none
        leave before one has); no request's own output length is read."""
        decodes = self.by_role["decode"]
        predict = after_s > 0 and bool(decodes)
        share_n = share_ctx = 0.0
        horizon = self.loop.now + after_s
        t_d = self._decode_s_sum / self._decode_s_n if self._decode_s_n else math.inf
        if predict:
            joining, joining_ctx = self._prefilled_within(after_s)
            share_n, share_ctx = joining / len(decodes), joining_ctx / len(decodes)
        views = []
        for d in decodes:
            step = d.step_estimate_s(1, prompt_tokens + 1)
            free = d.kv_capacity - d.kv_used - d.pending_ctx - prompt_tokens - 1
            predicted, predicted_free = step, free
            if predict:
                leaving, leaving_ctx = _decode_leaving(d, self.loop.now - t_d, horizon - t_d)
                batch = len(d.running) + len(d.pending) + 1 + share_n - leaving
                ctx = d.running_ctx + d.pending_ctx + prompt_tokens + 1 + share_ctx - leaving_ctx
                predicted = float(d.perf.decode_step_time_s(batch, ctx))
                predicted_free = free + leaving_ctx - math.ceil(share_ctx)
            views.append(DecodeView(d.name, len(d.running), free, step, predicted, predicted_free))
        return views

    def _prefilled_within(self, after_s: float) -> tuple[int, int]:
        """(requests, prompt tokens) the prefill instances will have finished within ``after_s``, from each
        instance's queue in order and the estimated prefill time of each request."""
        n = tokens = 0
        for inst in self.by_role["prefill"]:
            elapsed = 0.0
            for queue in (inst.prefilling, inst.waiting):
                for req in queue:
                    elapsed += req.est_work_s
                    if elapsed > after_s:
                        break
                    n += 1
                    tokens += req.prompt + 1
                if elapsed > after_s:
                    break
        return n, tokens

    def _arrive_disaggregated(self, now: float, req: SimRequest) -> None:
        scheduler = self.setup.scheduler
        assert scheduler is not None
        self._refresh()
        self._current = req
        self._memo.clear()
        decision = scheduler.choose(req.prompt, self)
        self._current = None
        if decision.reject:
            self._fail(req, now, f"rejected at arrival: {decision.reject}", RequestStatus.REJECTED)
            return
        inst = self._prefill_pool()[decision.prefill]
        mixed = self.by_role["mixed"]
        target: Optional[SimInstance] = None
        if self.setup.mixed_pool == "dynamic":
            target = self._mixed_for_prompt(inst, req)
        elif mixed and decision.est_ttft_s - self.prefill_time_s(decision.prefill, req.prompt, decision.reuse_tokens) \
                > self.setup.mixed_overflow_queue_s:
            target = self._first(self._mixed_queue)
        if target is not None:
            self.counters["mixed_prompts"] += 1
            self._enqueue_prefill(target, req, now, self._hbm_tokens(target, req))
            return
        local_hbm = self._hbm_tokens(inst, req)
        load = 0.0
        if decision.reuse_tokens > local_hbm:
            load = self._load_prefix(inst, req, now, local_hbm, decision.reuse_tokens, decision.fetch_tokens)
        if load > 0:
            req.fetch_s = load
            self.loop.schedule(now + load, PRIO_TRANSFER, self._on_loaded,
                               (inst, req, decision.reuse_tokens))
        else:
            self._enqueue_prefill(inst, req, now, decision.reuse_tokens)

    def _loaded(self, now: float, arg: tuple[SimInstance, SimRequest, int]) -> None:
        inst, req, reuse = arg
        self._enqueue_prefill(inst, req, now, reuse)

    def _load_prefix(self, inst: SimInstance, req: SimRequest, now: float, hbm_tokens: int, reuse: int,
                     fetched: int) -> float:
        """Bring the reused prefix into ``inst``'s HBM: DRAM part over PCIe, fetched part over the remote NIC."""
        pool = self.setup.kv_pool
        bs = req.spec.block_size
        per_token = inst.perf.kv_bytes_per_token
        dram_tokens = reuse - hbm_tokens
        t = dram_tokens * per_token / (pool.dram_bandwidth_gbps * 1e9)
        if fetched > 0 and self.remote_nics:
            _, end = self.remote_nics[inst.index].transfer(now, fetched * per_token)
            t = max(t, end - now)
            req.fetched_tokens = fetched
            first = (reuse - fetched) // bs
            keys = req.keys[first: reuse // bs]
            dram = self.dram[inst.index]
            threshold = pool.replication_threshold
            hot = []
            reads = self._remote_reads
            for key in keys:
                count = reads[key] + 1
                reads[key] = count
                if threshold and count >= threshold and dram is not None and key not in dram:
                    hot.append(key)
            if hot and dram is not None:
                self._dram_insert(dram, hot)
                self.counters["replicated_blocks"] += len(hot)
        if inst.hbm is not None:
            inst.hbm.record(req.keys[: reuse // bs])
        return t

    def _dram_insert(self, dram: BlockLRU, keys: Sequence[int]) -> None:
        """Record ``keys`` in the DRAM cache ``dram`` (counted in ``_holders`` unless it keeps its holder bits)."""
        if not isinstance(dram, HeldBlockLRU):
            holders = self._holders
            for key in keys:
                if key not in dram:
                    holders[key] += 1
        dram.record(keys)

    # -- instance hooks ---------------------------------------------------------------------------
    def on_prefill_done(self, inst: SimInstance, req: SimRequest, now: float) -> None:
        inst.touch()  # called in the middle of inst's iteration end: its load has changed
        if self.has_pool and req.keys:
            dram = self.dram[inst.index]
            if dram is not None:
                self._dram_insert(dram, req.keys)
        if inst.role != "prefill":
            inst.join(req, now)
            return
        if req.generated >= req.out_len or self.prefill_only:  # done at the prefill instance
            inst.release(req.reserved)
            req.reserved = 0
            self._finish_without_decode(inst, req, now)
            return
        if self.setup.rejection == "baseline" and decode_overloaded(self.decode_views(req.prompt, 0.0),
                                                                      self.setup.tbt_slo_s, False,
                                                                      self.setup.decode_load_threshold):
            inst.release(req.reserved)
            req.reserved = 0
            self.counters["rejected_after_prefill"] += 1
            self.wasted_prefill_tokens += req.prompt - req.cached_tokens
            self._fail(req, now, "rejected after prefill: decode instances overloaded (baseline)", RequestStatus.REJECTED)
            return
        if self._pull:
            target = self._decode_with_room(req.prompt)
            if target is None and self._fits_a_decode(req.prompt):  # no room now: the KV stays here, holding memory
                self._parked.append((inst, req))
                self.counters["parked_for_decode_room"] += 1
                return
            if target is None:  # no decode instance can ever hold it: it fails there, as under push
                target = self._pick_decode(req.prompt)
        else:
            target = self._pick_decode(req.prompt)
        self._hand_off(inst, target, req, now)

    def _fits_a_decode(self, prompt_tokens: int) -> bool:
        return any(prompt_tokens + 1 <= d.kv_capacity for d in self.by_role["decode"])

    def _decode_with_room(self, prompt_tokens: int) -> Optional[SimInstance]:
        """Pull: the decode instance with the fastest estimated step among those with room for the request's KV
        beside what they hold, what waits there and what is on its way to them (DistServe's decode allocates a
        request's blocks before it migrates them); ties to the lowest index; None when none has room."""
        best: Optional[SimInstance] = None
        best_step = math.inf
        inbound = self._inbound
        for d in self.by_role["decode"]:
            if d.kv_capacity - d.kv_used - d.pending_ctx - inbound[d.index] - prompt_tokens - 1 >= 0:
                step = d.step_estimate_s(1, prompt_tokens + 1)
                if step < best_step:
                    best, best_step = d, step
        return best

    def _hand_off(self, inst: SimInstance, target: SimInstance, req: SimRequest, now: float) -> None:
        """Move ``req``'s KV from the prefill instance ``inst`` to the decode instance ``target``."""
        if self._pull:
            self._inbound[target.index] += req.prompt + req.generated
        bytes_ = float(inst.perf.kv_bytes_per_token) * req.prompt
        if target.index == inst.index:
            self._transferred(now, (inst, target, req))
            return
        start, end = self.nics[inst.index].transfer(now, bytes_)
        if self.setup.layerwise_transfer:  # only what is left after the prefill's last layer is exposed
            full = end - start
            visible = max(full - (req.prefill_end_s - req.prefill_start_s), full / self.setup.num_layers)
            end = start + visible
        req.kv_transfer_s = end - now
        req.kv_transfer_bytes = bytes_
        self.loop.schedule(end, PRIO_TRANSFER, self._on_transferred, (inst, target, req))

    def _finish_without_decode(self, inst: SimInstance, req: SimRequest, now: float) -> None:
        """``req`` already has every token it will get (one output token, or a prefill-only cluster)."""
        req.decode_instance = inst.name
        req.decode_start_s = now
        req.status = RequestStatus.OK
        req.finish_s = now
        self.on_finished(inst, req, now)

    def _pick_decode(self, prompt_tokens: int) -> SimInstance:
        """Where a request of ``prompt_tokens`` decodes: among the decode instances with room for its KV, the
        one with the fastest estimated step (dynamic mixed pool, splitwise-sim's find_best_token_instance: the
        least KV scheduled, lent ones left out), ties to the lowest index; then the mixed pool; then, when
        every decode instance is full, the least-loaded one (it waits there)."""
        self._refresh()
        decodes = self.by_role["decode"]
        if self.setup.mixed_pool == "dynamic":
            self._return_idle()
            best = self._least_kv_scheduled(prompt_tokens)
            if best is None:
                target = self._mixed_for_decode(prompt_tokens)
                if target is not None:
                    self.counters["mixed_decodes"] += 1
                    return target
        else:
            best = self._fastest_decode(prompt_tokens)
            if best is None and self._member_kv is not None:
                self.counters["mixed_decodes"] += 1
                return self._first(self._member_kv)
        if best is None:  # every decode instance is full: wait at the least-loaded one
            best = min(decodes, key=lambda d: (d.kv_used + len(d.pending), d.index))
        return best

    def _least_kv_scheduled(self, prompt_tokens: int) -> Optional[SimInstance]:
        """The non-lent decode instance with the least KV scheduled (in use, on its way, and this request's)
        if it has room for the request, else None."""
        room = self._decode_room
        assert room is not None
        for _, index in room:
            inst = self.instances[index]
            if _kv_room(inst, prompt_tokens):
                return inst
            if self._decode_kv_capacity is not None:  # one KV capacity: the others have less room
                return None
        return None

    def _fastest_decode(self, prompt_tokens: int) -> Optional[SimInstance]:
        """The decode instance with room for the request whose estimated step, with the request added, is
        the shortest (ties: the lowest index); None when none has room."""
        steps = self._decode_steps
        kv_capacity = self._decode_kv_capacity  # set whenever steps is (the decodes share one model)
        extra = prompt_tokens + 1
        best: Optional[SimInstance] = None
        best_step = math.inf
        if steps is None or kv_capacity is None:  # no lower bound to prune with: every decode instance
            for d in self.by_role["decode"]:
                if _kv_room(d, prompt_tokens):
                    step = d.step_estimate_s(1, extra)
                    if step < best_step:
                        best, best_step = d, step
            return best
        # one model, whose step never decreases with the context: within a batch size the member with room and
        # the smallest context has the batch's shortest step, and the step at the batch's smallest context
        # (without this request) bounds every member's from below, so batches are visited by that bound
        # until it exceeds the best step found
        instances = self.instances
        limit = kv_capacity - extra  # one KV capacity: a context above this leaves no room for the KV
        tied: list[tuple[int, list[tuple[int, int]]]] = []  # batches whose first member with room ties the best
        for bound, _, members in steps.ordered():
            if bound > best_step:
                break
            for k, (context, index) in enumerate(members):
                if context > limit:
                    break
                d = instances[index]
                if _kv_room(d, prompt_tokens):
                    step = d.step_estimate_s(1, extra)
                    if step < best_step:
                        best, best_step, tied = d, step, [(k, members)]
                    elif step == best_step and best is not None:
                        tied.append((k, members))
                        if index < best.index:
                            best = d
                    break
        if best is None:
            return None
        # a member with more context can still tie the best step (a model flat in the context): the lowest
        # index among the ties wins, as in a scan
        for k, members in tied:
            for context, index in members[k + 1:]:
                if context > limit:
                    break
                if index > best.index:
                    continue
                d = instances[index]
                if not _kv_room(d, prompt_tokens):
                    continue
                step = d.step_estimate_s(1, extra)
                if step > best_step:
                    break
                if step == best_step:
                    best = d
        return best

    def _first(self, pool: Optional[SortedPool]) -> SimInstance:
        entry = pool.first() if pool is not None else None
        assert entry is not None
        return self.instances[entry[-1]]

    # -- Splitwise's dynamic mixed pool (engine.mixed_pool=dynamic; see the module docstring) ----------
    def _return_idle(self) -> None:
        """Lent machines with no work left go back to their own pool (only those touched since the last look
        can have become idle)."""
        self._refresh()
        check = self._lent_check
        if check:
            for i in sorted(check):
                inst = self.instances[i]
                if i in self.lent and not (inst.busy or inst.outstanding):
                    self._unlend(inst)
            check.clear()

    def _lend(self, inst: SimInstance) -> None:
        """``inst`` joins the mixed pool."""
        self.lent.add(inst.index)
        self._lent_check.add(inst.index)
        for pool in (self._decode_room, self._decode_pending, self._prefill_kv):
            if pool is not None:
                pool.discard(inst)
        for pool in (self._member_kv, self._member_pending):
            if pool is not None:
                pool.add(inst)

    def _unlend(self, inst: SimInstance) -> None:
        """``inst`` goes back to its own pool."""
        self.lent.discard(inst.index)
        for pool in (self._member_kv, self._member_pending):
            if pool is not None:
                pool.discard(inst)
        own = (self._decode_room, self._decode_pending) if inst.role == "decode" else (self._prefill_kv,)
        for pool in own:
            if pool is not None:
                pool.add(inst)

    def _queue_long(self, inst: SimInstance, prompt_tokens: int) -> bool:
        """splitwise-sim's ``is_queue_long``: work waits there and its pending tokens with this prompt exceed the
        threshold."""
        return bool(inst.waiting or inst.pending) and \
            _pending_tokens(inst) + prompt_tokens > self.setup.mixed_prompt_queue_tokens

    def _mixed_for_prompt(self, inst: SimInstance, req: SimRequest) -> Optional[SimInstance]:
        """Where a prompt goes instead of ``inst`` (the prompt pool's pick): None unless ``inst``'s queue is
        long; then the mixed pool's least-loaded member unless its queue is long too, else a token machine
        lent to the mixed pool (None when all are lent already: the prompt stays)."""
        if not self._queue_long(inst, req.prompt):
            return None
        self._return_idle()
        members, free = self._member_pending, self._decode_pending
        assert members is not None and free is not None
        for entry in members:  # the least-loaded member other than inst
            if entry[-1] != inst.index:
                best = self.instances[entry[-1]]
                if not self._queue_long(best, req.prompt):
                    return best
                break
        head = free.first()
        if head is None:
            return None
        lend = self.instances[head[-1]]
        self._lend(lend)
        self.counters["lent_token_machines"] += 1
        return lend

    def _mixed_for_decode(self, prompt_tokens: int) -> Optional[SimInstance]:
        """Where a request decodes when no token machine has room for its KV: the mixed pool's member with
        the least KV in use if it has room, else a prompt machine lent to the mixed pool (the one with the
        least KV in use, if it has room); None: none has room."""
        entry = self._member_kv.first() if self._member_kv is not None else None
        if entry is not None:
            best = self.instances[entry[-1]]
            if _kv_room(best, prompt_tokens):
                return best
        entry = self._prefill_kv.first() if self._prefill_kv is not None else None
        if entry is None:
            return None
        lend = self.instances[entry[-1]]
        if not _kv_room(lend, prompt_tokens):
            return None
        self._lend(lend)
        self.counters["lent_prompt_machines"] += 1
        return lend

    def _transferred(self, now: float, arg: tuple[SimInstance, SimInstance, SimRequest]) -> None:
        src, dst, req = arg
        src.release(req.reserved)
        req.reserved = 0
        src.wake(now)  # a prompt that waited for this memory can start
        if self._pull:
            self._inbound[dst.index] -= req.prompt + req.generated
        dst.enqueue_decode(req, now)

    def _unpark(self, now: float) -> None:
        """Pull: hand the parked requests off, oldest first, while a decode instance has room for the next."""
        parked = self._parked
        while parked:
            inst, req = parked[0]
            target = self._decode_with_room(req.prompt)
            if target is None:
                return
            parked.popleft()
            self._hand_off(inst, target, req, now)

    def on_finished(self, inst: SimInstance, req: SimRequest, now: float) -> None:
        inst.touch()
        if self._parked and inst.role == "decode":
            self._unpark(now)
        if self._route_index is not None:
            self._route_index.set(self._pos[inst.index], inst.outstanding)
        self._done += 1
        self._ok += 1
        if inst.role == "decode" and req.decode_start_s == req.decode_start_s:  # the uniform t_d estimate
            self._decode_s_sum += now - req.decode_start_s
            self._decode_s_n += 1
        router = self.setup.router
        if self._router_on_finished and router is not None:
            router.on_finished(RouteRequest(req.spec.request_id, req.keys, req.prompt), inst.role_index)
        req.keys = ()  # no cache looks them up again

    def on_failed(self, inst: SimInstance, req: SimRequest, now: float, reason: str) -> None:
        inst.touch()
        if self._route_index is not None:
            self._route_index.set(self._pos[inst.index], inst.outstanding)
        if req.reserved:
            inst.release(req.reserved)
            req.reserved = 0
        self._fail(req, now, reason)
        if self._parked and inst.role == "decode":  # its KV is free: a parked request may fit now
            self._unpark(now)


def _queue_key(inst: SimInstance) -> tuple[float, int]:
    return (inst.queued_work_s, inst.index)


def _queue_outstanding_key(inst: SimInstance) -> tuple[float, int, int]:
    return (inst.queued_work_s, inst.outstanding, inst.index)


def _room_key(inst: SimInstance) -> tuple[int, int]:
    return (inst.kv_used + inst.pending_ctx, inst.index)


def _batch_state(inst: SimInstance) -> tuple[int, int]:
    """(sequences, context tokens) of a decode instance's batch, running and pending: its step estimate's inputs."""
    return (len(inst.running) + len(inst.pending), inst.running_ctx + inst.pending_ctx)


def _one_model(instances: Sequence[SimInstance]) -> bool:
    return len({id(inst.perf) for inst in instances}) == 1


def _pending_key(inst: SimInstance) -> tuple[int, int]:
    return (_pending_tokens(inst), inst.index)


def _kv_key(inst: SimInstance) -> tuple[float, int]:
    return (inst.kv_used / inst.kv_capacity if inst.kv_capacity else math.inf, inst.index)


class _PrefillViews(Sequence[PrefillView]):
    """Every prefill instance as a :class:`PrefillView`, each built when the scheduler reads it (random and
    round-robin read one)."""

    def __init__(self, simulation: Simulation, pool: list[SimInstance], req: SimRequest) -> None:
        self._simulation, self._pool, self._req = simulation, pool, req

    def __len__(self) -> int:
        return len(self._pool)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[k] for k in range(len(self._pool))[i]]
        inst = self._pool[i]
        return PrefillView(inst.name, inst.queued_work_s, self._simulation._local_tokens(inst, self._req),
                           inst.outstanding)


def _pending_tokens(inst: SimInstance) -> int:
    """splitwise-sim's ``sched_pending_tokens``: prompt tokens queued or computing, plus one per sequence
    decoding or waiting to."""
    return inst.queued_tokens + len(inst.running) + len(inst.pending)


def _kv_room(inst: SimInstance, prompt_tokens: int) -> bool:
    """The instance can take a sequence of ``prompt_tokens`` (+ its first token) into its KV cache now."""
    return inst.kv_capacity - inst.kv_used - inst.pending_ctx - prompt_tokens - 1 >= 0


def _decode_leaving(inst: SimInstance, after: float, until: float) -> tuple[int, int]:
    """(sequences, their context tokens) of the requests running on ``inst`` whose decode started in
    ``(after, until]``: with a uniform decode time ``t_d``, those that end within ``(after + t_d, until + t_d]``."""
    n = ctx = 0
    for req in inst.running.values():
        if after < req.decode_start_s <= until:
            n += 1
            ctx += req.base_ctx + (inst.diter - req.join_diter)
    return n, ctx
