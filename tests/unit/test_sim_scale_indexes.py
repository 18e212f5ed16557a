"""The indexed choices (issue #14 item 4) equal the linear scans they replace, on randomized states.

Each test keeps a tiny reference scan (the code the index replaced) and compares it with the indexed answer
over many random states, with many ties (small integer loads, repeated queue estimates) and evictions, so a
tie-break that differs would show.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import pytest

from systems.config import HardwareConfig
from systems.policies.base import IndexedLoads, InstanceLoad, OutstandingIndex, RouteRequest, TieBreaker
from systems.policies.cache_aware import CacheAwarePolicy
from systems.policies.pd import PDScheduler
from systems.policies.simple import LeastOutstandingPolicy
from systems.sim.deployment_setup import DeploymentSetup, KVPoolSetup, PoolSetup
from systems.sim.keys import request_keys
from systems.sim.links import LinkSpec
from systems.sim.load_index import BatchBuckets, SortedPool, run_levels
from systems.sim.perf.base import InstanceShape, PerfModel
from systems.sim.request import SimRequest
from systems.sim.simulation import Simulation
from vocab.records import RequestSpec

HW = HardwareConfig(name="test", peak_tflops_bf16=1.0, mem_bandwidth_gbps=1.0, mem_gib=1.0)
SHAPE = InstanceShape("test")
LINK = LinkSpec("test", bandwidth_gbps=1.0, latency_s=0.0, efficiency=1.0)


class StepPerf(PerfModel):
    """decode step = 5 ms + ``per_seq`` per sequence + ``per_ctx`` per context token (``per_ctx = 0``: flat in the
    context, every instance of one batch size ties); ``quantum`` rounds the step up to a grid (plateaus)."""

    name = "step"

    def __init__(self, capacity: int = 5000, per_seq: float = 1e-3, per_ctx: float = 1e-6, quantum: float = 0.0,
                 dip_at: int = 0) -> None:
        self._cap, self.per_seq, self.per_ctx, self.quantum, self.dip_at = capacity, per_seq, per_ctx, quantum, dip_at

    @property
    def kv_bytes_per_token(self) -> int:
        return 1000

    @property
    def kv_capacity_tokens(self) -> int:
        return self._cap

    def prefill_time_s(self, sum_tokens: float, sum_sq_tokens: float, n_seqs: int = 1) -> float:
        return 0.010 + 1e-4 * sum_tokens

    def decode_step_time_s(self, batch_size, sum_context):  # type: ignore[override]
        # not monotone in the batch: from dip_at sequences on, a batch is cheaper (as a fitted model's switch)
        per_seq = self.per_seq / 2 if self.dip_at and batch_size >= self.dip_at else self.per_seq
        t = 0.005 + per_seq * batch_size + self.per_ctx * np.asarray(sum_context, dtype=float)
        if self.quantum:
            t = np.ceil(t / self.quantum) * self.quantum
        return t if isinstance(sum_context, np.ndarray) else float(t)

    def decode_monotone_in_context(self) -> bool:
        return self.per_ctx >= 0


def _least_outstanding_scan(loads: list[InstanceLoad], ties: TieBreaker, among: list[int] | None = None) -> int:
    pool = range(len(loads)) if among is None else among
    best = min(loads[i].outstanding for i in pool)
    return ties.pick([i for i in pool if loads[i].outstanding == best], len(loads))


def test_least_outstanding_from_the_index_equals_the_scan() -> None:
    rng = np.random.default_rng(1)
    for n in (1, 3, 17, 70):
        values = [int(v) for v in rng.integers(0, 4, n)]
        index = OutstandingIndex(values)
        indexed, scanned = LeastOutstandingPolicy(), TieBreaker()
        for _ in range(300):
            for i in rng.integers(0, n, int(rng.integers(0, 4))):
                values[int(i)] = int(rng.integers(0, 6))
                index.set(int(i), values[int(i)])
            loads = [InstanceLoad(f"i{k}", v) for k, v in enumerate(values)]
            view = IndexedLoads(n, lambda k, values=values: InstanceLoad(f"i{k}", values[k]), index)
            req = RouteRequest(0, (), 10)
            assert indexed.choose(req, view) == _least_outstanding_scan(loads, scanned)
            among = sorted({int(i) for i in rng.integers(0, n, int(rng.integers(1, n + 1)))})
            mask = sum(1 << i for i in among)
            best = min(values[i] for i in among)
            assert index.least(mask) == sum(1 << i for i in among if values[i] == best)
            assert index.at_most(best) == sum(1 << i for i in range(n) if values[i] <= best)


@pytest.mark.parametrize("capacity,max_imbalance", [(None, None), (6, None), (None, 1), (4, 0)])
def test_cache_aware_from_holder_sets_equals_the_scan(capacity: int | None, max_imbalance: int | None) -> None:
    """Two policies see the same requests; one scores every instance, the other intersects holder sets."""
    rng = np.random.default_rng(2)
    n = 23
    indexed = CacheAwarePolicy(capacity_blocks_per_instance=capacity, max_imbalance=max_imbalance)
    scanned = CacheAwarePolicy(capacity_blocks_per_instance=capacity, max_imbalance=max_imbalance)
    values = [0] * n
    index = OutstandingIndex(values)
    for r in range(600):
        first = int(rng.integers(0, 5))
        hashes = tuple(first * 100 + int(k) for k in range(int(rng.integers(0, 4))))
        hashes += tuple(int(h) for h in rng.integers(1000, 1040, int(rng.integers(0, 3))))
        req = RouteRequest(r, hashes, 10 * len(hashes))
        loads = [InstanceLoad(f"i{k}", v) for k, v in enumerate(values)]
        view = IndexedLoads(n, lambda k: InstanceLoad(f"i{k}", values[k]), index)
        got, want = indexed.choose(req, view), scanned.choose(req, loads)
        assert got == want, f"request {r}"
        indexed.on_routed(req, got)
        scanned.on_routed(req, want)
        values[got] += 1
        index.set(got, values[got])
        for i in rng.integers(0, n, 2):  # some finish
            if values[int(i)]:
                values[int(i)] -= 1
                index.set(int(i), values[int(i)])


def test_sorted_pool_first_is_the_scan_minimum() -> None:
    rng = np.random.default_rng(3)

    class M:
        def __init__(self, index: int) -> None:
            self.index, self.q, self.o = index, 0.0, 0

    members = [M(i) for i in range(40)]
    pool = SortedPool(lambda m: (m.q, m.o, m.index), members[:30])
    inside = set(range(30))
    for _ in range(2000):
        m = members[int(rng.integers(0, 40))]
        m.q, m.o = float(rng.integers(0, 3)) * 0.25, int(rng.integers(0, 3))
        pool.update(m)
        if rng.random() < 0.1:
            if m.index in inside:
                pool.discard(m)
                inside.discard(m.index)
            else:
                pool.add(m)
                inside.add(m.index)
        if inside:
            want = min((members[i] for i in inside), key=lambda x: (x.q, x.o, x.index))
            assert pool.first() == (want.q, want.o, want.index)
            assert [e[-1] for e in pool] == sorted(inside, key=lambda i: (members[i].q, members[i].o, i))


def test_run_levels_split_positions_by_leading_run() -> None:
    rng = np.random.default_rng(4)
    for _ in range(200):
        n = int(rng.integers(1, 12))
        keys = [int(k) for k in rng.integers(0, 6, int(rng.integers(0, 6)))]
        held = [set(int(k) for k in rng.integers(0, 6, int(rng.integers(0, 6)))) for _ in range(n)]
        first: dict[int, int] = {}
        for pos, hs in enumerate(held):
            for h in hs:
                first[h] = first.get(h, 0) | 1 << pos
        runs = []
        for hs in held:
            k = 0
            while k < len(keys) and keys[k] in hs:
                k += 1
            runs.append(k)
        want = {}
        for pos, k in enumerate(runs):
            want[k] = want.get(k, 0) | 1 << pos
        assert run_levels(keys, (1 << n) - 1, first) == sorted(want.items())


def test_batch_buckets_keep_batches_sorted_and_bounded() -> None:
    rng = np.random.default_rng(5)

    class M:
        def __init__(self, index: int) -> None:
            self.index, self.b, self.c = index, 0, 0

    members = [M(i) for i in range(25)]
    buckets = BatchBuckets(lambda m: (m.b, m.c), lambda b, c: 0.01 * b + 1e-5 * c, members)
    for _ in range(1000):
        m = members[int(rng.integers(0, 25))]
        m.b, m.c = int(rng.integers(0, 5)), int(rng.integers(0, 50))
        buckets.update(m)
        seen = []
        last = -math.inf
        for bound, batch, items in buckets.ordered():
            assert bound >= last
            last = bound
            assert items == sorted((x.c, x.index) for x in members if x.b == batch)
            assert bound == 0.01 * batch + 1e-5 * items[0][0]
            seen.append(batch)
        assert sorted(seen) == sorted({x.b for x in members})


# -- the cluster's choices on random instance states ------------------------------------------------
def _set_load(inst, rng, capacity: int) -> None:
    """A random decode / prefill load: running and pending sequences, their contexts, reserved KV, a queue."""
    b = int(rng.integers(0, 5))
    inst.running = {k: None for k in range(b)}
    inst.pending = deque(range(int(rng.integers(0, 3))))
    inst.running_ctx = int(rng.integers(0, 6)) * 100 * (b > 0)
    inst.pending_ctx = int(rng.integers(0, 4)) * 100 * (len(inst.pending) > 0)
    inst.reserved = int(rng.choice([0, 0, 0, 300, capacity]))
    inst.waiting = deque(range(int(rng.integers(0, 3))))
    inst.queued_work_s = float(rng.integers(0, 3)) * 0.5
    inst.queued_tokens = int(rng.integers(0, 3)) * 100
    inst.busy = bool(rng.random() < 0.3)
    inst.touch()


def _fastest_decode_scan(cluster: Simulation, prompt: int):
    best, best_step = None, math.inf
    for d in cluster.by_role["decode"]:
        free = d.kv_capacity - d.kv_used - d.pending_ctx - prompt - 1
        step = d.step_estimate_s(1, prompt + 1)
        if free >= 0 and step < best_step:
            best, best_step = d, step
    return best


@pytest.mark.parametrize("perf", [StepPerf(), StepPerf(per_ctx=0.0), StepPerf(quantum=4e-3), StepPerf(dip_at=3)],
                         ids=["linear", "flat-in-context", "plateaus", "cheaper-large-batches"])
def test_decode_choice_equals_the_scan(perf: StepPerf) -> None:
    rng = np.random.default_rng(6)
    setup = DeploymentSetup("distserve", (PoolSetup("prefill", 2, SHAPE, perf, HW), PoolSetup("decode", 30, SHAPE, perf, HW)),
                         LINK, scheduler=PDScheduler("round_robin"))
    cluster = Simulation(setup)
    assert cluster._decode_steps is not None  # the bucketed choice, not the scan fallback
    decodes = cluster.by_role["decode"]
    for _ in range(400):
        for i in rng.integers(0, len(decodes), int(rng.integers(1, 6))):
            _set_load(decodes[int(i)], rng, perf.kv_capacity_tokens)
        prompt = int(rng.choice([1, 100, 1000, 2500, 4999]))
        cluster._refresh()
        assert cluster._fastest_decode(prompt) is _fastest_decode_scan(cluster, prompt)


def _candidates_scan(cluster: Simulation, req: SimRequest) -> list:
    """The grouping scan the holder sets replaced: per (model, local prefix, HBM prefix), the shortest queue
    (then, for load_balancing, the fewest outstanding), then the lowest index."""
    by_outstanding = cluster.setup.scheduler.policy == "load_balancing"
    best: dict = {}
    for inst in cluster.by_role["prefill"]:
        key = (id(inst.perf), cluster._local_tokens(inst, req), cluster._hbm_tokens(inst, req))
        other = best.get(key)
        if other is None or inst.queued_work_s < other.queued_work_s or (
                by_outstanding and inst.queued_work_s == other.queued_work_s and inst.outstanding < other.outstanding):
            best[key] = inst
    return sorted(((inst, key[1]) for key, inst in best.items()), key=lambda c: c[0].index)


@pytest.mark.parametrize("policy", ["conductor", "local_cache_aware", "prefix_match", "load_balancing"])
@pytest.mark.parametrize("two_models", [False, True])
def test_prefill_candidates_equal_the_grouping_scan(policy: str, two_models: bool) -> None:
    rng = np.random.default_rng(7)
    perf, other = StepPerf(capacity=3000), StepPerf(capacity=3000)
    pools = (PoolSetup("prefill", 40, SHAPE, perf, HW), PoolSetup("decode", 2, SHAPE, perf, HW))
    if two_models:  # built in code only: a second pool of prefill instances with their own model
        pools = (PoolSetup("prefill", 22, SHAPE, perf, HW), PoolSetup("prefill", 19, SHAPE, other, HW),
                 PoolSetup("decode", 2, SHAPE, perf, HW))
    setup = DeploymentSetup("mooncake", pools, LINK, scheduler=PDScheduler(policy),
                         kv_pool=KVPoolSetup(1000, 10.0, LinkSpec("r", 10.0, 0.0, 1.0), 2))
    cluster = Simulation(setup)
    assert cluster._prefill_queue is not None
    cluster._size_caches(100)  # HBM: 30 blocks, DRAM: 10 blocks per node
    prefills = cluster.by_role["prefill"]
    prefixes = [tuple(range(base, base + 8)) for base in (0, 100, 200)]

    def spec(r: int, ids: tuple[int, ...]) -> RequestSpec:
        return RequestSpec(request_id=r, arrival_s=0.0, input_length=100 * len(ids), output_length=5, hash_ids=ids,
                           block_size=100)

    for r in range(300):
        for k in rng.integers(0, len(prefills), int(rng.integers(0, 4))):
            _set_load(prefills[int(k)], rng, 3000)
        for _ in range(int(rng.integers(0, 3))):  # caches fill and evict
            keys = request_keys(spec(-1, prefixes[int(rng.integers(0, 3))][: int(rng.integers(1, 9))]))
            inst = prefills[int(rng.integers(0, len(prefills)))]
            if rng.random() < 0.5 and inst.hbm is not None:
                inst.hbm.record(keys)
            else:
                cluster._dram_insert(cluster.dram[inst.index], keys)
        s = spec(r, prefixes[int(rng.integers(0, 3))][: int(rng.integers(0, 9))] + (9000 + r,))
        req = SimRequest(s, request_keys(s))
        got = cluster._candidates(req)
        want = _candidates_scan(cluster, req)
        if policy == "load_balancing":  # only the least-loaded instance can win: it is the only candidate
            want = [min(want, key=lambda c: (c[0].queued_work_s, c[0].outstanding, c[0].index))]
        assert [(i.index, t) for i, t in got] == [(i.index, t) for i, t in want], f"request {r}"


def _kv_room(inst, prompt: int) -> bool:
    return inst.kv_capacity - inst.kv_used - inst.pending_ctx - prompt - 1 >= 0


def _pending_tokens(inst) -> int:
    return inst.queued_tokens + len(inst.running) + len(inst.pending)


def _queue_long(cluster: Simulation, inst, prompt: int) -> bool:
    return bool(inst.waiting or inst.pending) and _pending_tokens(inst) + prompt > cluster.setup.mixed_prompt_queue_tokens


def _members_scan(cluster: Simulation, lent: set[int]) -> list:
    return [*cluster.by_role["mixed"], *(cluster.instances[i] for i in sorted(lent))]


def _returned_scan(cluster: Simulation, lent: set[int]) -> set[int]:
    return {i for i in lent if cluster.instances[i].busy or cluster.instances[i].outstanding}


def _pick_decode_scan(cluster: Simulation, lent: set[int], prompt: int):
    """The decode choice as it scanned: (instance, lent set after)."""
    decodes = cluster.by_role["decode"]
    dynamic = cluster.setup.mixed_pool == "dynamic"
    if dynamic:
        lent = _returned_scan(cluster, lent)
    best, best_score = None, math.inf
    for d in decodes:
        if dynamic and d.index in lent:
            continue
        free = d.kv_capacity - d.kv_used - d.pending_ctx - prompt - 1
        score = d.kv_capacity - free if dynamic else d.step_estimate_s(1, prompt + 1)
        if free >= 0 and score < best_score:
            best, best_score = d, score
    if best is None and dynamic:
        members = _members_scan(cluster, lent)
        if members:
            m = min(members, key=lambda m: (m.kv_used / m.kv_capacity, m.index))
            if _kv_room(m, prompt):
                return m, lent
        free = [p for p in cluster.by_role["prefill"] if p.index not in lent]
        if free:
            lend = min(free, key=lambda p: (p.kv_used / p.kv_capacity, p.index))
            if _kv_room(lend, prompt):
                return lend, lent | {lend.index}
    elif best is None and cluster.by_role["mixed"]:
        return min(cluster.by_role["mixed"], key=lambda m: (m.kv_used / m.kv_capacity, m.index)), lent
    if best is None:
        best = min(decodes, key=lambda d: (d.kv_used + len(d.pending), d.index))
    return best, lent


def _mixed_for_prompt_scan(cluster: Simulation, lent: set[int], inst, prompt: int):
    if not _queue_long(cluster, inst, prompt):
        return None, lent
    lent = _returned_scan(cluster, lent)
    members = [m for m in _members_scan(cluster, lent) if m is not inst]
    if members:
        best = min(members, key=lambda m: (_pending_tokens(m), m.index))
        if not _queue_long(cluster, best, prompt):
            return best, lent
    free = [d for d in cluster.by_role["decode"] if d.index not in lent]
    if not free:
        return None, lent
    lend = min(free, key=lambda d: (_pending_tokens(d), d.index))
    return lend, lent | {lend.index}


@pytest.mark.parametrize("mixed_pool,n_mixed", [("dynamic", 0), ("dynamic", 2), ("dedicated", 3)])
def test_mixed_pool_choices_equal_the_scans(mixed_pool: str, n_mixed: int) -> None:
    """Splitwise's mixed pool: lending, returning and picking, against the scans over the lent set."""
    rng = np.random.default_rng(8)
    perf = StepPerf(capacity=2000)
    pools = [PoolSetup("prefill", 20, SHAPE, perf, HW), PoolSetup("decode", 20, SHAPE, perf, HW)]
    if n_mixed:
        pools.append(PoolSetup("mixed", n_mixed, SHAPE, perf, HW))
    setup = DeploymentSetup("splitwise", tuple(pools), LINK, scheduler=PDScheduler("load_balancing"),
                         mixed_pool=mixed_pool, mixed_prompt_queue_tokens=250)
    cluster = Simulation(setup)
    lent: set[int] = set()
    lends = 0
    for _ in range(500):
        for i in rng.integers(0, len(cluster.instances), int(rng.integers(1, 8))):
            _set_load(cluster.instances[int(i)], rng, 2000)
        prompt = int(rng.choice([1, 300, 1500]))
        if mixed_pool == "dynamic" and rng.random() < 0.5:
            inst = cluster.by_role["prefill"][int(rng.integers(0, 20))]
            want, lent = _mixed_for_prompt_scan(cluster, lent, inst, prompt)
            req = SimRequest(RequestSpec(request_id=0, arrival_s=0.0, input_length=prompt, output_length=2), ())
            assert cluster._mixed_for_prompt(inst, req) is want
        else:
            want, lent = _pick_decode_scan(cluster, lent, prompt)
            assert cluster._pick_decode(prompt) is want
        assert cluster.lent == lent
        lends += len(lent)
    assert mixed_pool == "dedicated" or lends > 100  # the lent set was exercised
