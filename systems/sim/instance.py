"""One simulated serving instance: vLLM-style continuous batching over a paged KV cache.

Every iteration runs the decode step of each running sequence and, within a token budget
(``max_num_batched_tokens``), prompt chunks from the FCFS waiting queue (chunked prefill). A request
reserves KV for its whole context when its prefill starts; running sequences grow one token per
iteration. When the cache cannot hold the next iteration's growth, the most recently started sequence
is preempted and later recomputed (vLLM's recompute preemption). Prefix caching: a prefill starts
from the longest run of leading blocks found in the instance's HBM cache (and anything the scheduler
had loaded for it); the cache holds at most the instance's KV capacity (a block in use counts once).

Without chunked prefill the instance follows vLLM v0's default scheduler (``_schedule_default`` in
``vllm/core/scheduler.py``, e.g. v0.5.1): whole prompts within the budget, and an iteration that prefills
runs no decodes ("Don't schedule decodes if prefills are scheduled"), so running sequences wait out
every prefill iteration. With ``mix_whole`` (``engine.whole_prompts``, splitwise-sim's ``SplitwiseInstance``)
the running sequences decode in a prefill iteration when the whole prompts and they fit the budget (one
token each), and wait otherwise (splitwise-sim lets as many as fit join; here all or none do).

Stretches of decode-only iterations are not simulated one by one: while the batch does not change,
step times form a known sequence (context grows by the batch size each step), so the instance plans a
*segment* up to the next finish, evaluates its step times at once (``PerfModel.decode_segment_ends``: one
vectorised call, or Python floats for a short segment, the same floats), and cuts it short at
the next iteration boundary if new work arrives. Each instance keeps the end time of every decode
iteration (an ``array('d')``: 8 bytes each, written from the model's list of floats by a slice
assignment); a request's token times are a slice of that timeline. A planned segment's end times go into the timeline when
it is planned (its entries past ``diter`` until it ends; a cut keeps the ones it needs): the list of floats
the model returns is read and freed at once, while it is still in the processor's cache, where keeping it
until the segment ended read it back from memory on a large cluster. The array grows by doubling (zeros past
the entries in use): ``array`` grows by about 1/16 at a time, and on a large cluster, whose many timelines
are short, each of those steps copied a timeline that had left the cache.

Laid out for a large cluster, where an instance's objects have left the cache between two of its events:
``outstanding`` is a counter kept with every change to the four queues (not their four lengths read), and the
finish heap holds the running requests themselves, ordered by ``(finish_diter, rid)`` (a preempted one is
taken out of it at once), so its comparisons read one object each, not a tuple and its integers.

Every call that can change an instance's load (work arriving, KV released, an iteration ending) ends by
appending the instance to ``dirty_log`` (once until the cluster clears ``touched``): the cluster re-keys
just those instances in its load indexes before its next choice (:mod:`systems.sim.load_index`).
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from typing import Optional

import numpy as np

from systems.policies.cache_aware import BlockLRU
from systems.sim.events import PRIO_ITERATION, EventQueue
from systems.sim.perf.base import InstanceShape, PerfModel
from systems.sim.perf.roofline_steps import RooflineKernel
from systems.sim.request import SimRequest
from vocab.records import RequestStatus

SEGMENT_CAP = 1024  # decode iterations planned at once


def _remove_identical(items: list[SimRequest], req: SimRequest) -> None:
    """``items.remove(req)`` by identity (what ``remove`` compares for requests), without asking each earlier
    request's type how it compares."""
    i = 0
    while items[i] is not req:
        i += 1
    del items[i]


def _before(a: SimRequest, b: SimRequest) -> bool:
    """``a`` finishes first: the finish heap's order, ``(finish_diter, rid)``."""
    return a.finish_diter < b.finish_diter or (a.finish_diter == b.finish_diter and a.rid < b.rid)


def _sift_up(heap: list[SimRequest], i: int, req: SimRequest) -> None:
    """Place ``req`` at ``i`` or above it, moving larger parents down."""
    while i > 0:
        parent = (i - 1) >> 1
        above = heap[parent]
        if not _before(req, above):
            break
        heap[i] = above
        i = parent
    heap[i] = req


def _sift_down(heap: list[SimRequest], i: int, req: SimRequest) -> None:
    """Place ``req`` at ``i`` or below it, moving smaller children up."""
    n = len(heap)
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        child = heap[c]
        if c + 1 < n and _before(heap[c + 1], child):
            c += 1
            child = heap[c]
        if not _before(child, req):
            break
        heap[i] = child
        i = c
    heap[i] = req


def _finish_heap_push(heap: list[SimRequest], req: SimRequest) -> None:
    """Add a running request to its instance's finish heap."""
    heap.append(req)
    _sift_up(heap, len(heap) - 1, req)


def _finish_heap_pop(heap: list[SimRequest]) -> SimRequest:
    """Remove and return the request of a non-empty finish heap that finishes first."""
    top = heap[0]
    last = heap.pop()
    if heap:
        _sift_down(heap, 0, last)
    return top


def _finish_heap_remove(heap: list[SimRequest], req: SimRequest) -> None:
    """Take ``req`` (a preempted sequence) out of the finish heap, before its ``finish_diter`` changes."""
    i = 0
    while heap[i] is not req:
        i += 1
    last = heap.pop()
    if i < len(heap):
        if i > 0 and _before(last, heap[(i - 1) >> 1]):
            _sift_up(heap, i, last)
        else:
            _sift_down(heap, i, last)


class InstanceHooks:
    """What an instance tells its cluster (the cluster overrides these)."""

    def on_prefill_done(self, inst: SimInstance, req: SimRequest, now: float) -> None:  # pragma: no cover
        inst.join(req, now)

    def on_finished(self, inst: SimInstance, req: SimRequest, now: float) -> None:  # pragma: no cover
        pass

    def on_failed(self, inst: SimInstance, req: SimRequest, now: float, reason: str) -> None:  # pragma: no cover
        pass


class SimInstance:
    """A serving instance of one role: ``colocated`` (or ``mixed``), ``prefill`` or ``decode``."""

    __slots__ = (
        "_chunks", "_decoding", "_finish_heap", "_kernel", "_on_end_mixed", "_on_end_segment", "_seg_n", "_seg_start",
        "_timeline", "_timeline_list", "_version", "budget", "busy", "busy_s", "chunked", "dirty_log",
        "diter", "hbm", "hooks", "index", "kv_capacity", "loop", "max_seqs", "mix_whole", "name", "outstanding", "pending",
        "pending_ctx", "perf", "preemptions", "prefill_tokens_computed", "prefilling", "queued_tokens",
        "queued_work_s", "reserved", "role", "role_index", "running", "running_ctx", "shape", "touched", "waiting",
    )

    def __init__(self, index: int, name: str, role: str, shape: InstanceShape, perf: PerfModel, loop: EventQueue,
                 hooks: InstanceHooks, max_num_batched_tokens: int, max_num_seqs: int, chunked_prefill: bool,
                 hbm_cache: Optional[BlockLRU] = None) -> None:
        # hot state first (the compiled class lays its fields out in this order): an event on an instance reads
        # a few cache lines of it, not every line of the object
        self.touched = False  # in dirty_log since the cluster last re-keyed this instance
        self.busy = False
        self._decoding = False  # the running sequences decode in the current prefill iteration
        self.chunked = chunked_prefill
        self.mix_whole = False  # unchunked: decodes join a prefill iteration that fits the budget (splitwise-sim)
        self._version = 0
        self._seg_n = 0  # iterations of the planned decode segment (0: none); their end times follow diter
        self.diter = 0  # decode iterations completed
        self.outstanding = 0  # requests in waiting, prefilling, running and pending
        self.running_ctx = 0  # context tokens of the running sequences
        self.reserved = 0  # KV tokens reserved by prefills in progress and finished prefills not yet handed off
        self.pending_ctx = 0  # context tokens of the pending requests
        self.kv_capacity = int(perf.kv_capacity_tokens)
        self.budget = max_num_batched_tokens
        self.max_seqs = max_num_seqs
        self.queued_tokens = 0
        self.queued_work_s = 0.0  # estimated prefill seconds of the waiting queue
        self.busy_s = 0.0  # time spent in iterations
        self._seg_start = 0.0
        self.loop = loop
        # the handlers of this instance's events, bound once (a bound method made for every event would be freed
        # when it has gone cold, on a large cluster)
        self._on_end_segment: Callable[[float, int], None] = self._end_segment
        self._on_end_mixed: Callable[[float, int], None] = self._end_mixed
        # the model's iteration times on the compiled core, when it has them (PerfModel.kernel): called instead of
        # the model's methods, with the same floats
        self._kernel: Optional[RooflineKernel] = perf.kernel() if isinstance(perf, PerfModel) else None
        self.hooks = hooks
        self.dirty_log: list[SimInstance] = []  # the cluster's list of instances whose load may have changed
        self.waiting: deque[SimRequest] = deque()  # prefill work not started (new prompts, preempted sequences)
        self.prefilling: list[SimRequest] = []  # prefills started (KV reserved), in start order
        self.pending: deque[SimRequest] = deque()  # KV arrived from a prefill instance, waiting to decode
        self.running: dict[int, SimRequest] = {}
        self._finish_heap: list[SimRequest] = []  # the running requests, smallest (finish_diter, rid) first
        self._timeline = array("d")  # end times of decode iterations 0 .. diter - 1 (then the planned segment's)
        self._chunks: list[SimRequest] = []  # the prompts of the current prefill iteration (each its .chunk tokens)
        self.hbm = hbm_cache  # prefix cache; the cluster sizes it once the block size is known
        self.index = index
        self.prefill_tokens_computed = 0
        # read now and then
        self.role_index = 0  # position among the instances of its role
        self.name = name
        self.role = role
        self.shape = shape
        self.perf = perf
        self.preemptions = 0
        self._timeline_list: Optional[list[float]] = None  # the same as Python floats, made for the records

    def touch(self) -> None:
        """Record that this instance's load may have changed (see the module docstring)."""
        if not self.touched:
            self.touched = True
            self.dirty_log.append(self)

    # -- load views -------------------------------------------------------------------------------
    @property
    def kv_used(self) -> int:
        return self.running_ctx + self.reserved

    def prefill_estimate_s(self, tokens: int, sum_sq_tokens: float) -> float:
        """The model's time for one prefill iteration of ``tokens`` new tokens (one sequence): the scheduler's
        estimate of queued prefill work."""
        k = self._kernel
        return k.prefill_s(float(tokens), sum_sq_tokens) if k is not None else \
            float(self.perf.prefill_time_s(tokens, sum_sq_tokens, 1))

    def step_estimate_s(self, extra_seqs: int = 0, extra_ctx: int = 0) -> float:
        """Estimated decode step with ``extra_seqs`` more sequences of ``extra_ctx`` context in all."""
        b = len(self.running) + len(self.pending) + extra_seqs
        if b <= 0:
            return 0.0
        ctx = self.running_ctx + self.pending_ctx + extra_ctx
        k = self._kernel
        return k.step_s(float(b), float(ctx)) if k is not None else float(self.perf.decode_step_time_s(b, ctx))

    # -- work arrives -----------------------------------------------------------------------------
    def enqueue_prefill(self, req: SimRequest, now: float) -> None:
        """Queue a prompt (or a preempted sequence at the front) for prefill."""
        if req.recomputing:
            self.waiting.appendleft(req)
        else:
            self.waiting.append(req)
        self.outstanding += 1
        self.queued_work_s += req.est_work_s
        self.queued_tokens += req.ctx_target
        self._wake(now)
        self.touch()

    def enqueue_decode(self, req: SimRequest, now: float) -> None:
        """A request whose KV has arrived joins the decode queue."""
        self.pending.append(req)
        self.outstanding += 1
        self.pending_ctx += req.prompt + req.generated
        self._wake(now)
        self.touch()

    def release(self, tokens: int) -> None:
        """Free KV held for a request that left (handed off or rejected)."""
        self.reserved -= tokens
        self.touch()

    def wake(self, now: float) -> None:
        """Start an iteration if idle (e.g. a prefill that waited for KV memory now fits)."""
        if not self.busy:
            self._start(now)

    def _wake(self, now: float) -> None:
        if not self.busy:
            self._start(now)
            return
        seg_n = self._seg_n
        if seg_n:  # cut the decode segment at the next iteration boundary (its end times never decrease)
            base = self.diter
            timeline = self._timeline
            n = bisect_right(timeline, now, base, base + seg_n) - base + 1
            if n < seg_n:
                self._seg_n = n
                self._version += 1
                self.loop.schedule(timeline[base + n - 1], PRIO_ITERATION, self._on_end_segment, self._version)

    # -- scheduling -------------------------------------------------------------------------------
    def _admit_pending(self, now: float) -> None:
        pending = self.pending
        while pending and len(self.running) < self.max_seqs:
            req = pending[0]
            need = req.prompt + req.generated
            if need > self.kv_capacity:
                pending.popleft()
                self.outstanding -= 1
                self.pending_ctx -= need
                self.hooks.on_failed(self, req, now, f"context of {need} tokens exceeds the KV capacity of "
                                     f"{self.name} ({self.kv_capacity} tokens)")
                continue
            if self.running_ctx + self.reserved + need > self.kv_capacity:
                break
            pending.popleft()
            self.outstanding -= 1
            self.pending_ctx -= need
            req.decode_start_s = now
            self._join_running(req)

    def _preempt_for_growth(self, now: float) -> None:
        running = self.running
        while running and self.running_ctx + self.reserved + len(running) > self.kv_capacity:
            rid = next(reversed(running))
            req = running.pop(rid)
            self.outstanding -= 1
            _finish_heap_remove(self._finish_heap, req)
            done = self.diter - req.join_diter
            if done:
                req.ranges.append((self, req.join_diter, done))
            req.generated += done
            self.running_ctx -= req.base_ctx + done
            req.finish_diter = -1
            req.recomputing = True
            req.preemptions += 1
            self.preemptions += 1
            req.ctx_target = req.prompt + req.generated
            req.computed = 0
            req.est_work_s = self.prefill_estimate_s(req.ctx_target, float(req.ctx_target) ** 2)
            self.enqueue_prefill(req, now)

    def _begin_prefill(self, req: SimRequest, now: float) -> bool:
        """Move the head of the waiting queue to ``prefilling``: reserve its KV and find its cached prefix.

        False when the KV cache cannot take it now (it stays at the head, FCFS) or it can never fit
        (it fails and leaves the queue)."""
        need = req.ctx_target
        if self.running_ctx + self.reserved + need > self.kv_capacity:
            if need > self.kv_capacity:
                self.waiting.popleft()
                self.outstanding -= 1
                self.queued_work_s -= req.est_work_s
                self.queued_tokens -= req.ctx_target
                self.hooks.on_failed(self, req, now, f"prompt of {need} tokens can never fit the KV capacity of "
                                     f"{self.name} ({self.kv_capacity} tokens)")
            return False
        self.waiting.popleft()
        self.prefilling.append(req)  # (outstanding unchanged)
        self.reserved += need
        req.reserved = need
        cached = 0
        if self.hbm is not None and req.keys:
            cached = self.hbm.prefix_len(req.keys) * req.spec.block_size
        if not req.recomputing and req.cached_tokens > cached:
            cached = req.cached_tokens
        if cached > req.prompt - 1:  # cached = max(min(cached, prompt - 1, need - 1), 0)
            cached = req.prompt - 1
        if cached > need - 1:
            cached = need - 1
        if cached < 0:
            cached = 0
        if not req.recomputing:
            req.cached_tokens = cached
            req.prefill_start_s = now
            req.prefill_instance = self.name
        req.computed = cached
        return True

    def _form_prefill(self, now: float) -> list[SimRequest]:
        budget = self.budget - len(self.running) if self.chunked else self.budget
        chunks: list[SimRequest] = []
        seqs = len(self.running)
        i = 0
        prefilling = self.prefilling
        waiting = self.waiting
        while budget > 0 and seqs < self.max_seqs:
            if i == len(prefilling):  # every started prefill has its chunk: start the next (FCFS)
                if not waiting:
                    break
                before = len(waiting)
                if not self._begin_prefill(waiting[0], now):
                    if len(waiting) < before:  # it could never fit and failed; try the next
                        continue
                    break
            req = prefilling[i]
            remaining = req.ctx_target - req.computed
            if self.chunked:
                c = remaining if remaining < budget else budget
            elif chunks and remaining > budget:  # whole prompts only; the first may exceed the budget
                break
            else:
                c = remaining
            req.chunk = c
            chunks.append(req)
            budget -= c
            seqs += 1
            i += 1
        return chunks

    def _start(self, now: float) -> None:
        if self.pending:
            self._admit_pending(now)
        running = self.running
        # a prefill instance decodes too when lent to Splitwise's dynamic mixed pool
        if running and self.running_ctx + self.reserved + len(running) > self.kv_capacity:
            self._preempt_for_growth(now)
        chunks = self._form_prefill(now) if self.waiting or self.prefilling else []
        b = len(self.running)
        if chunks:
            tok = 0
            sq = 0.0
            for req in chunks:
                c = req.chunk
                p = req.computed
                tok += c
                sq += float(p + c) ** 2 - float(p) ** 2
            self._decoding = bool(b) and (self.chunked or (self.mix_whole and tok + b <= self.budget))
            k = self._kernel
            if k is not None:
                dur = k.mixed_s(float(tok), sq, float(b), float(self.running_ctx)) if self._decoding else \
                    k.prefill_s(float(tok), sq)
            else:
                dur = self.perf.mixed_step_time_s(tok, sq, len(chunks), b, self.running_ctx) if self._decoding else \
                    self.perf.prefill_time_s(tok, sq, len(chunks))
            self._drop_planned_segment()
            self.busy = True
            self._chunks = chunks
            self._version += 1
            self.busy_s += dur
            self.loop.schedule(now + dur, PRIO_ITERATION, self._on_end_mixed, self._version)
        elif b:
            self._start_segment(now)
        else:
            self.busy = False

    def _drop_planned_segment(self) -> None:
        """Forget a decode segment planned but replaced before it ended (a preemption's queued sequence woke the
        instance while it was planning, and it planned again): its end times are overwritten by the next."""
        self._seg_n = 0

    def _timeline_for(self, size: int) -> array:
        """The timeline, with room for ``size`` entries (doubled when it has fewer: see the module docstring)."""
        timeline = self._timeline
        have = len(timeline)
        if have < size:
            grow = size - have
            if grow < have:
                grow = have
            if grow < 64:
                grow = 64
            timeline.frombytes(bytes(8 * grow))
        return timeline

    def _start_segment(self, now: float) -> None:
        self._drop_planned_segment()
        heap = self._finish_heap
        b = len(self.running)
        n = heap[0].finish_diter - self.diter if heap else SEGMENT_CAP
        if b:  # n = max(1, min(n, room // b, SEGMENT_CAP))
            room = (self.kv_capacity - self.running_ctx - self.reserved) // b
            if room < n:
                n = room
        if n > SEGMENT_CAP:
            n = SEGMENT_CAP
        if n < 1:
            n = 1
        k = self._kernel
        base = self.diter
        timeline = self._timeline_for(base + n)
        if k is not None and n <= k.max_loop_steps:
            timeline[base:base + n] = array("d", k.segment_ends(float(b), float(self.running_ctx), n, now))
        else:
            ends = self.perf.decode_segment_ends(b, self.running_ctx, n, now)
            if isinstance(ends, list):
                timeline[base:base + n] = array("d", ends)
            else:  # the same doubles, as bytes
                timeline[base:base + n] = array("d", ends.astype(np.float64, copy=False).tobytes())
        self.busy = True
        self._seg_start = now
        self._seg_n = n
        self._version += 1
        self.loop.schedule(timeline[base + n - 1], PRIO_ITERATION, self._on_end_segment, self._version)

    # -- iteration ends ---------------------------------------------------------------------------
    def _end_segment(self, now: float, version: int) -> None:
        if version != self._version:
            return
        n = self._seg_n  # its end times are in the timeline already
        b = len(self.running)
        self.busy_s += now - self._seg_start
        self.diter += n
        self.running_ctx += b * n
        self._seg_n = 0
        self._finish_due(now)
        self.busy = False
        self._start(now)
        self.touch()

    def _end_mixed(self, now: float, version: int) -> None:
        if version != self._version:
            return
        b = len(self.running) if self._decoding else 0
        if b:
            self._timeline_for(self.diter + 1)[self.diter] = now
            self.diter += 1
            self.running_ctx += b
            self._finish_due(now)
        done: list[SimRequest] = []
        for req in self._chunks:
            c = req.chunk
            req.computed += c
            self.prefill_tokens_computed += c
            if req.computed >= req.ctx_target:
                done.append(req)
        self._chunks = []
        for req in done:
            _remove_identical(self.prefilling, req)
            self.outstanding -= 1  # (back once it joins this instance's running sequences)
            self.queued_work_s -= req.est_work_s
            self.queued_tokens -= req.ctx_target
            if not self.waiting and not self.prefilling:
                self.queued_work_s = 0.0  # no float drift on an empty queue: idle instances tie exactly
            if self.hbm is not None and req.keys:
                self.hbm.record(req.keys)
            req.generated += 1
            req.token_times.append(now)
            if req.recomputing:
                req.recomputing = False
                self.join(req, now)
            else:
                req.first_token_s = now
                req.prefill_end_s = now
                self.hooks.on_prefill_done(self, req, now)
        self.busy = False
        self._start(now)
        self.touch()

    def _finish_due(self, now: float) -> None:
        heap = self._finish_heap
        diter = self.diter
        while heap and heap[0].finish_diter <= diter:
            req = _finish_heap_pop(heap)
            del self.running[req.rid]
            self.outstanding -= 1
            count = req.finish_diter - req.join_diter
            req.ranges.append((self, req.join_diter, count))
            self.running_ctx -= req.base_ctx + (diter - req.join_diter)
            req.generated += count
            req.finish_diter = -1
            self._finish(req, now)

    def _finish(self, req: SimRequest, now: float) -> None:
        req.status = RequestStatus.OK
        req.finish_s = now
        self.hooks.on_finished(self, req, now)

    # -- decode membership ------------------------------------------------------------------------
    def _join_running(self, req: SimRequest) -> None:
        req.base_ctx = req.prompt + req.generated
        req.join_diter = self.diter
        req.finish_diter = self.diter + (req.out_len - req.generated)
        req.decode_instance = self.name
        self.running_ctx += req.base_ctx
        self.running[req.rid] = req
        self.outstanding += 1
        _finish_heap_push(self._finish_heap, req)

    def join(self, req: SimRequest, now: float) -> None:
        """A sequence whose prefill ran here starts decoding here (its reservation becomes running KV)."""
        self.reserved -= req.reserved
        req.reserved = 0
        if req.generated >= req.out_len:
            req.decode_instance = self.name
            if math.isnan(req.decode_start_s):
                req.decode_start_s = now
            self._finish(req, now)
            self.touch()
            return
        if math.isnan(req.decode_start_s):
            req.decode_start_s = now
        self._join_running(req)
        self.touch()

    # -- after the run ----------------------------------------------------------------------------
    def iteration_list(self, first: int, count: int) -> list[float]:
        """:meth:`iteration_times` as a list of Python floats, for records once the run is over: the floats are
        made once per instance and shared by the records (each holds 8 bytes per token, not a float of its own)."""
        if self._timeline_list is None or len(self._timeline_list) != self.diter:
            self._timeline_list = self._timeline[:self.diter].tolist()
        return self._timeline_list[first:first + count]

    def iteration_timeline(self) -> np.ndarray:
        """End times of every decode iteration so far: a view of the timeline, which cannot grow while the view
        lives (the instance's next iteration would raise ``BufferError``); for records once the run is over."""
        return np.frombuffer(self._timeline, dtype=np.float64, count=self.diter)

    def iteration_times(self, first: int, count: int) -> np.ndarray:
        """End times of decode iterations ``first .. first + count - 1`` (a copy)."""
        return np.array(self._timeline[first:first + count], dtype=np.float64)

