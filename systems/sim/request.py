"""One request's state while the simulator runs it, and how it becomes a ``RequestRecord``."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, Optional

from vocab.records import RequestRecord, RequestSpec, RequestStatus

NAN = math.nan
_OK = RequestStatus.OK

# the fields to_record fills, in this order (every field of RequestRecord)
_RECORD_FIELDS = ("request_id", "status", "arrival_s", "sent_s", "first_token_s", "finish_s", "input_length",
                  "output_length", "n_out", "chunk_times_s", "cached_tokens", "instance", "error", "prefix_group",
                  "shared_prefix_len", "session_id", "turn", "extra")


def _record_builder() -> Optional[Callable[..., RequestRecord]]:
    """A faster ``RequestRecord(*values)`` for the simulator's millions of records: a frozen dataclass's
    ``__init__`` sets each field through ``object.__setattr__``; this sets the slots directly (the same
    object: equal, same repr, same pickle). None (the constructor is used) unless ``RequestRecord`` is a
    slotted dataclass with exactly :data:`_RECORD_FIELDS` and no ``__post_init__``."""
    try:
        names = tuple(f.name for f in dataclasses.fields(RequestRecord))
        setters = tuple(getattr(RequestRecord, n).__set__ for n in names)
    except (TypeError, AttributeError):
        return None
    if names != _RECORD_FIELDS or hasattr(RequestRecord, "__post_init__") or "__dict__" in dir(RequestRecord):
        return None
    new = object.__new__
    cls = RequestRecord
    (s_id, s_status, s_arrival, s_sent, s_first, s_finish, s_input, s_output, s_n_out, s_chunks, s_cached,
     s_instance, s_error, s_group, s_shared, s_session, s_turn, s_extra) = setters

    def build(request_id: Any, status: Any, arrival_s: Any, sent_s: Any, first_token_s: Any, finish_s: Any,
              input_length: Any, output_length: Any, n_out: Any, chunk_times_s: Any, cached_tokens: Any,
              instance: Any, error: Any, prefix_group: Any, shared_prefix_len: Any, session_id: Any, turn: Any,
              extra: Any) -> RequestRecord:
        r = new(cls)
        s_id(r, request_id)
        s_status(r, status)
        s_arrival(r, arrival_s)
        s_sent(r, sent_s)
        s_first(r, first_token_s)
        s_finish(r, finish_s)
        s_input(r, input_length)
        s_output(r, output_length)
        s_n_out(r, n_out)
        s_chunks(r, chunk_times_s)
        s_cached(r, cached_tokens)
        s_instance(r, instance)
        s_error(r, error)
        s_group(r, prefix_group)
        s_shared(r, shared_prefix_len)
        s_session(r, session_id)
        s_turn(r, turn)
        s_extra(r, extra)
        return r

    return build


_build_record = _record_builder() or RequestRecord


class SimRequest:
    """Mutable per-request state; times are simulated seconds from the run's origin."""

    __slots__ = (
        "finish_diter", "rid", "join_diter", "base_ctx", "generated", "out_len", "prompt", "ctx_target", "computed",
        "chunk", "reserved", "est_work_s", "recomputing", "keys", "spec", "ranges", "token_times", "cached_tokens",
        "decode_start_s", "status", "error", "fetched_tokens", "fetch_s", "prefill_start_s", "prefill_end_s",
        "first_token_s", "finish_s", "decode_instance", "prefill_instance", "kv_transfer_s", "kv_transfer_bytes",
        "preemptions",
    )

    def __init__(self, spec: RequestSpec, keys: tuple[int, ...]) -> None:
        # what the scheduler reads first (the compiled class lays its fields out in this order): a finish heap's
        # comparison reads the first two
        self.finish_diter = -1
        self.rid = spec.request_id  # the spec's request id, read without reading the spec
        self.join_diter = -1
        self.base_ctx = 0
        self.generated = 0
        self.out_len = max(spec.output_length, 1)
        self.prompt = spec.input_length
        self.ctx_target = self.prompt  # tokens the (re)prefill must hold: prompt, or prompt + generated
        self.computed = 0  # tokens of ctx_target in KV (cached or computed)
        self.chunk = 0  # tokens of its prompt in the instance's current prefill iteration
        self.reserved = 0  # KV tokens reserved on the instance doing the prefill
        self.est_work_s = 0.0
        self.recomputing = False
        self.keys = keys  # chained keys of the prompt's full blocks (a cluster sets them at arrival, drops them at the finish)
        self.spec = spec
        self.ranges: list[tuple[object, int, int]] = []  # (instance, first decode-iteration index, count)
        self.token_times: list[float] = []  # tokens produced outside decode iterations (prefill ends)
        self.cached_tokens = 0  # prompt tokens reused from a cache in the (first) prefill
        self.decode_start_s = NAN
        self.status = RequestStatus.UNFINISHED
        self.error = ""
        self.fetched_tokens = 0
        self.fetch_s = 0.0
        self.prefill_start_s = NAN
        self.prefill_end_s = NAN
        self.first_token_s = NAN
        self.finish_s = NAN
        self.decode_instance = ""
        self.prefill_instance = ""
        self.kv_transfer_s = 0.0
        self.kv_transfer_bytes = 0.0
        self.preemptions = 0

    def token_time_list(self) -> list[float]:
        """The time of every token this request produced, in order (gathered from the instances' iteration
        timelines)."""
        times = [float(t) for t in self.token_times]  # event times may be NumPy floats (from the arrivals)
        if self.ranges:
            for inst, first, count in self.ranges:
                times += inst.iteration_list(first, count)  # type: ignore[attr-defined]
            if self.preemptions:  # else in order: the prefill's token, then one stretch of decode iterations
                times.sort()
        return times

    def record_instance(self) -> str:
        """The record's ``instance``: the prefill instance, ``P->D`` when another one decoded."""
        prefill, decode = self.prefill_instance, self.decode_instance
        return f"{prefill}->{decode}" if decode and decode != prefill else prefill

    def to_record(self) -> RequestRecord:
        """The record of this request (token times gathered from the instances' iteration timelines)."""
        spec = self.spec
        times = self.token_time_list()
        status = self.status
        ok = status == _OK
        prefill_start = self.prefill_start_s
        arrival = spec.arrival_s
        extra = {
            "queue_s": prefill_start - arrival if prefill_start == prefill_start else NAN,
            "prefill_s": self.prefill_end_s - prefill_start,
            "kv_transfer_s": self.kv_transfer_s,
            "kv_transfer_bytes": self.kv_transfer_bytes,
            "kv_fetch_s": self.fetch_s,
            "kv_fetched_tokens": float(self.fetched_tokens),
            "decode_s": self.finish_s - self.decode_start_s if ok else NAN,
            "preemptions": float(self.preemptions),
        }
        instance = self.record_instance()
        n_out = len(times)
        return _build_record(spec.request_id, status, arrival, arrival, self.first_token_s if n_out else NAN,
                             self.finish_s, spec.input_length, spec.output_length, n_out, tuple(times),
                             self.cached_tokens, instance, self.error, spec.prefix_group, spec.shared_prefix_len,
                             spec.session_id, spec.turn, extra)
