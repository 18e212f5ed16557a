"""The simulator's cheaper per-request paths (issue #14 item 4, the constant per request) give the very results of
the paths they replace: decode segments timed with Python floats (short ones always, longer ones on the compiled
core, up to roofline.COMPILED_SEGMENT_MAX steps), the roofline's prefill and mixed iterations as plain functions,
arrivals run as the event queue's stream, records built slot by slot, and prefix caches that keep their holder bit
sets themselves."""

from __future__ import annotations

import numpy as np
import pytest

from systems.hardware_catalog import load_hardware
from systems.policies.cache_aware import BlockLRU
from systems.sim.events import EventQueue
from systems.sim.load_index import BlockHolders
from systems.sim.perf import base as perf_base
from systems.sim.perf import roofline
from systems.sim.perf.base import InstanceShape, PerfModel
from systems.sim.perf.distserve_fit import DISTSERVE_JSON, DistServeFitModel
from systems.sim.perf.fitted import FittedProfileModel
from systems.sim.perf.profiles import SPLITWISE_CSV, find_profile
from systems.sim.perf.roofline import RooflineModel
from systems.sim.perf.roofline_steps import roofline_segment_ends
from systems.sim.perf.splitwise_profile import SplitwiseProfileModel
from systems.sim.request import _build_record
from tests.unit.test_perf_fitted_profile import TINY, make_profile
from tests.unit.test_sim_perf_roofline import load_model
from vocab.records import RequestRecord, RequestStatus


def _array_ends(m: PerfModel, b: int, c: int, n: int, now: float) -> list[float]:
    """The segment's end times as the simulator computed them before (one NumPy evaluation, or the scalar
    step for a single step)."""
    if n == 1:
        return [now + float(m.decode_step_time_s(b, c))]
    steps = m.decode_step_time_s(b, np.arange(c, c + b * n, b, dtype=np.float64))
    ends = np.cumsum(steps)
    ends += now
    return ends.tolist()


def _models() -> list[PerfModel]:
    models: list[PerfModel] = [
        RooflineModel(load_model("llama3_8b"), load_hardware("a100_80gb"), InstanceShape("a100_80gb", 1)),
        RooflineModel(load_model("llama3_1_70b"), load_hardware("a800_80gb"), InstanceShape("a800_80gb", 8),
                      overlap=0.4),
    ]
    splitwise_dir = str(find_profile(SPLITWISE_CSV)).removesuffix(SPLITWISE_CSV)
    models.append(SplitwiseProfileModel(load_model("llama2_70b"), load_hardware("a100_80gb"),
                                        InstanceShape("a100_80gb", 8), profiles_dir=splitwise_dir))
    distserve_dir = str(find_profile(DISTSERVE_JSON["distserve"]).parents[1])
    for pp in (1, 2):
        models.append(DistServeFitModel(load_model("opt_13b"), load_hardware("a100_80gb"),
                                        InstanceShape("a100_80gb", 1, pp), profiles_dir=distserve_dir))
    models.append(FittedProfileModel(TINY, load_hardware("a100_80gb"), InstanceShape("a100_80gb", 1),
                                     profile=make_profile(), profile_check=False))
    return models


@pytest.mark.parametrize("model", _models(), ids=lambda m: f"{m.name}")
def test_short_segments_timed_in_python_give_the_array_floats(model: PerfModel) -> None:
    assert model._segment_ends(3, 1000, 5, 0.0) is not None  # the model has the Python path
    rng = np.random.default_rng(7)
    for _ in range(400):
        b, c = int(rng.integers(1, 600)), int(rng.integers(0, 3_000_000))
        n = int(rng.integers(1, roofline.COMPILED_SEGMENT_MAX + 20))
        now = float(rng.uniform(0, 1e5))
        got = model.decode_segment_ends(b, c, n, now)
        if n <= (roofline.LOOP_SEGMENT_MAX if isinstance(model, RooflineModel) else perf_base.SCALAR_SEGMENT_MAX):
            assert type(got) is list and all(type(t) is float for t in got)  # timed by a loop: Python floats
        else:  # the array itself
            assert isinstance(got, np.ndarray) and got.dtype == np.float64
        assert list(got) == _array_ends(model, b, c, n, now)  # exact: the same floats


@pytest.mark.parametrize("model", _models()[:2], ids=("full_overlap", "overlap_tp8"))
def test_the_stretch_loop_gives_the_array_floats_at_any_length(model: RooflineModel) -> None:
    """What lets the compiled core time longer stretches with its loop than the sources do (roofline.LOOP_SEGMENT_MAX):
    up to the longest stretch an instance plans (SEGMENT_CAP), the loop's floats are the array path's, whichever
    of the two (compiled or from its source) this process runs."""
    from systems.sim.instance import SEGMENT_CAP
    rng = np.random.default_rng(11)
    for n in (perf_base.SCALAR_SEGMENT_MAX + 1, 200, SEGMENT_CAP, *rng.integers(49, SEGMENT_CAP, 20)):
        b, c, now = int(rng.integers(1, 600)), int(rng.integers(0, 3_000_000)), float(rng.uniform(0, 1e5))
        got = roofline_segment_ends(float(b), float(c), int(n), now, *model._stretch)
        assert got == _array_ends(model, b, c, int(n), now)


def _combined(m: RooflineModel, compute: float, memory: float, tokens: float) -> float:
    """An iteration's time as the roofline model computed it on scalars before its arithmetic moved to
    roofline_steps: Python's max and min, then the terms left to right."""
    t = max(compute, memory)
    if m.overlap != 1.0:
        t = t + (1.0 - m.overlap) * min(compute, memory)
    if m._comm_fixed != 0.0 or m._comm_token != 0.0:
        t = t + m._comm_fixed + m._comm_token * tokens
    return t + m._overhead


@pytest.mark.parametrize("model", _models()[:2], ids=("full_overlap", "overlap_tp8"))
def test_prefill_and_mixed_iterations_give_the_floats_of_the_formula(model: RooflineModel) -> None:
    """RooflineModel.prefill_time_s and mixed_step_time_s (roofline_steps' functions, compiled with the core)
    give the very floats of the model's formula evaluated in Python, for integer, float and NumPy arguments,
    on both sides of the roofline."""
    rng = np.random.default_rng(5)
    for _ in range(300):
        tokens = int(rng.integers(0, 40_000))
        sq = float(tokens) ** 2 - float(int(rng.integers(0, max(tokens, 1)))) ** 2
        b, ctx = int(rng.integers(0, 400)), int(rng.integers(0, 2_000_000))
        expect = 0.0 if tokens <= 0 else _combined(
            model, tokens * model._t_flop_token + sq * model._t_attn_sq, model._t_weights + tokens * model._t_kv_token,
            tokens)
        for arg in (tokens, float(tokens), np.int64(tokens)):
            got = model.prefill_time_s(arg, sq, 1)
            assert type(got) is float and got == expect, (arg, sq)
        total = tokens + b
        expect = 0.0 if total <= 0 else _combined(
            model, total * model._t_flop_token + sq * model._t_attn_sq + ctx * model._t_attn_ctx,
            model._t_weights + (total + ctx) * model._t_kv_token, total)
        for args in ((tokens, sq, 2, b, ctx), (float(tokens), sq, 2, b, float(ctx)), (np.int64(tokens), sq, 2, b, ctx)):
            got = model.mixed_step_time_s(*args)
            assert type(got) is float and got == expect, args
    assert model.prefill_time_s(0, 0.0) == 0.0 and model.mixed_step_time_s(0, 0.0, 0, 0, 0) == 0.0


@pytest.mark.parametrize("model", _models()[:2], ids=("full_overlap", "overlap_tp8"))
def test_the_kernel_an_instance_calls_gives_the_models_floats(model: RooflineModel) -> None:
    """RooflineModel.kernel (what a simulated instance calls instead of the model's methods) gives the floats of
    prefill_time_s, mixed_step_time_s, scalar decode_step_time_s and decode_segment_ends; the other models have
    none (their instances call the methods)."""
    kernel = model.kernel()
    assert kernel.max_loop_steps == roofline.LOOP_SEGMENT_MAX
    rng = np.random.default_rng(17)
    for _ in range(300):
        tokens, b, ctx = int(rng.integers(0, 40_000)), int(rng.integers(0, 400)), int(rng.integers(0, 2_000_000))
        sq = float(tokens) ** 2 - float(int(rng.integers(0, max(tokens, 1)))) ** 2
        assert kernel.prefill_s(float(tokens), sq) == model.prefill_time_s(tokens, sq, 1)
        assert kernel.mixed_s(float(tokens), sq, float(b), float(ctx)) == model.mixed_step_time_s(tokens, sq, 3, b, ctx)
        assert kernel.step_s(float(b), float(ctx)) == float(model.decode_step_time_s(b, ctx))
        n, now = int(rng.integers(1, kernel.max_loop_steps + 1)), float(rng.uniform(0, 1e5))
        assert kernel.segment_ends(float(b + 1), float(ctx), n, now) == list(model.decode_segment_ends(b + 1, ctx, n, now))
    assert all(m.kernel() is None for m in _models()[2:])


@pytest.mark.parametrize(("b", "c", "n", "bound"), [
    (4, 1_000, 30, "memory"),  # memory at every step: the loop that skips the compute term
    (300, 0, 40, "compute"),  # compute at every step
    (200, 50_000, 40, "both"),  # compute first, memory after about 52,000 tokens of context
])
def test_python_segments_on_either_side_of_the_roofline_give_the_array_floats(b: int, c: int, n: int,
                                                                             bound: str) -> None:
    model = _models()[0]  # llama3_8b on one A100, full overlap, no communication
    assert model._full_overlap and model._no_comm
    contexts = np.arange(c, c + b * n, b, dtype=np.float64)
    compute = contexts * model._t_attn_ctx + b * model._t_flop_token
    memory = (contexts + b) * model._t_kv_token + model._t_weights
    memory_bound = compute <= memory
    assert {"memory": memory_bound.all(), "compute": not memory_bound.any(),
            "both": 0 < memory_bound.sum() < n}[bound]
    got = model._segment_ends(b, c, n, 12.5)
    assert got is not None and got == _array_ends(model, b, c, n, 12.5)


def test_a_model_without_a_python_path_uses_the_array() -> None:
    class Linear(PerfModel):
        kv_bytes_per_token = 1  # type: ignore[assignment]
        kv_capacity_tokens = 10  # type: ignore[assignment]

        def prefill_time_s(self, sum_tokens, sum_sq_tokens, n_seqs=1):
            return 0.0

        def decode_step_time_s(self, batch_size, sum_context):
            return 1e-3 + 1e-7 * sum_context + 3e-5 * batch_size

    m = Linear()
    for n in (1, 2, 7, 300):
        assert list(m.decode_segment_ends(4, 500, n, 2.5)) == _array_ends(m, 4, 500, n, 2.5)


def test_stream_events_run_where_the_heap_would_put_them() -> None:
    """A stream of priority 2 interleaves with scheduled events by (time, priority), and counts as events."""
    def run(use_stream: bool) -> tuple[list[tuple[str, float]], int]:
        loop = EventQueue()
        log: list[tuple[str, float]] = []
        times = [0.0, 1.0, 1.0, 2.0, 5.0]

        def arrive(t: float, k: int) -> None:
            log.append((f"a{k}", t))
            log.append(("len", float(len(loop))))
            if k == 1:  # work the arrival causes: before (prio 0) and after (prio 3) the next arrival at 1.0
                loop.schedule(1.0, 0, lambda t, _: log.append(("it", t)))
                loop.schedule(1.0, 3, lambda t, _: log.append(("sample", t)))
            if not use_stream and k + 1 < len(times):
                loop.schedule(times[k + 1], 2, arrive, k + 1)

        loop.schedule(2.0, 1, lambda t, _: log.append(("transfer", t)))
        loop.schedule(9.0, 0, lambda t, _: log.append(("late", t)))
        if use_stream:
            loop.set_stream(times, 2, arrive, list(range(len(times))))
        else:
            loop.schedule(times[0], 2, arrive, 0)
        loop.run()
        return log, loop.processed

    streamed, heaped = run(True), run(False)
    assert streamed[0][:4] == [("a0", 0.0), ("len", 6.0), ("a1", 1.0), ("len", 5.0)]
    # the heap holds one arrival at a time: compare the order and the counts, not the queue lengths
    assert [e for e in streamed[0] if e[0] != "len"] == [e for e in heaped[0] if e[0] != "len"]
    assert streamed[1] == heaped[1] == 9
    names = [e[0] for e in streamed[0] if e[0] != "len"]
    assert names == ["a0", "a1", "it", "a2", "sample", "transfer", "a3", "a4", "late"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_queue_runs_events_in_the_order_heapq_runs_them(seed: int) -> None:
    """Random times with many ties, four priorities, handlers that schedule follow-ups (some in the past):
    the queue's own heap runs them in heapq's ``(time, priority, seq)`` order."""
    import heapq
    import random

    rng = random.Random(seed)
    plan = [(float(rng.randint(0, 40)), rng.randint(0, 3), rng.random() < 0.3) for _ in range(3000)]

    def by_queue() -> list[int]:
        loop, order = EventQueue(), []

        def fire(t: float, i: int) -> None:
            order.append(i)
            if plan[i][2] and i + 1500 < len(plan):  # a follow-up, possibly "before now" (runs at now)
                j = i + 1500
                loop.schedule(t + plan[j][0] - 20.0, plan[j][1], fire, j)
        for i in range(1500):
            loop.schedule(plan[i][0], plan[i][1], fire, i)
        loop.run()
        return order

    def by_heapq() -> list[int]:
        heap: list[tuple[float, int, int, int]] = []
        seq, now, order = 0, 0.0, []
        for i in range(1500):
            seq += 1
            heapq.heappush(heap, (max(plan[i][0], now), plan[i][1], seq, i))
        while heap:
            now, _, _, i = heapq.heappop(heap)
            order.append(i)
            if plan[i][2] and i + 1500 < len(plan):
                j = i + 1500
                seq += 1
                heapq.heappush(heap, (max(now + plan[j][0] - 20.0, now), plan[j][1], seq, j))
        return order

    assert by_queue() == by_heapq()


def test_the_queue_refuses_a_priority_it_cannot_order() -> None:
    loop = EventQueue()
    with pytest.raises(OverflowError, match="priorities 0"):
        loop.schedule(1.0, -1, lambda t, _: None)
    with pytest.raises(OverflowError, match="priorities 0"):
        loop.schedule(1.0, 1 << 20, lambda t, _: None)


def test_a_stream_stops_at_until_and_resumes() -> None:
    loop = EventQueue()
    seen: list[float] = []
    loop.set_stream([1.0, 2.0, 3.0], 2, lambda t, _: seen.append(t), [None] * 3)
    loop.run(until=2.0)
    assert seen == [1.0, 2.0] and len(loop) == 1 and loop.now == 2.0
    loop.run()
    assert seen == [1.0, 2.0, 3.0] and len(loop) == 0 and loop.processed == 3
    with pytest.raises(ValueError, match="3 times and 2 arguments"):
        loop.set_stream([1.0, 2.0, 3.0], 2, lambda t, _: None, [None] * 2)


def test_records_built_slot_by_slot_equal_the_constructor() -> None:
    values = (7, RequestStatus.OK, 1.5, 1.5, 2.0, 3.25, 512, 96, 2, (2.0, 3.25), 256, "P1->D3", "", 4, 256, -1, 0,
              {"queue_s": 0.1, "decode_s": float("nan")})
    built, made = _build_record(*values), RequestRecord(*values)
    assert type(built) is RequestRecord and _build_record is not RequestRecord
    assert repr(built) == repr(made)
    assert built.chunk_times_s == made.chunk_times_s and built.instance == made.instance
    with pytest.raises(AttributeError):  # still frozen
        built.n_out = 3  # type: ignore[misc]


def test_held_caches_keep_the_holder_bits_as_the_hooks_do() -> None:
    rng = np.random.default_rng(3)
    held, hooked = BlockHolders(), BlockHolders()
    caches = [held.cache(p, 6) for p in range(3)]
    refs = []
    for p in range(3):
        inserted, evicted = hooked.hooks(p)
        refs.append(BlockLRU(6, on_evict=evicted, on_insert=inserted))
    for _ in range(500):
        p = int(rng.integers(0, 3))
        keys = [int(k) for k in rng.integers(0, 20, int(rng.integers(1, 9)))]
        caches[p].record(keys)
        refs[p].record(keys)
        assert held.bits == hooked.bits
        assert list(caches[p]._blocks) == list(refs[p]._blocks)
        assert caches[p].prefix_len(keys) == refs[p].prefix_len(keys)
