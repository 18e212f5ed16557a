"""One request's state while the simulator runs it, and how it becomes a ``RequestRecord``."""

from __future__ import annotations

import math

from harness.records import RequestRecord, RequestSpec, RequestStatus

NAN = math.nan


class SimRequest:
    """Mutable per-request state; times are simulated seconds from the run's origin."""

    __slots__ = (
        "spec", "keys", "prompt", "out_len", "status", "error",
        "ctx_target", "computed", "cached_tokens", "reserved", "fetched_tokens", "fetch_s",
        "prefill_start_s", "prefill_end_s", "first_token_s", "finish_s", "est_work_s",
        "generated", "base_ctx", "join_diter", "finish_diter", "decode_instance", "prefill_instance",
        "ranges", "token_times", "kv_transfer_s", "kv_transfer_bytes", "preemptions", "decode_start_s",
        "recomputing",
    )

    def __init__(self, spec: RequestSpec, keys: tuple[int, ...]) -> None:
        self.spec = spec
        self.keys = keys  # chained keys of the prompt's full blocks
        self.prompt = spec.input_length
        self.out_len = max(spec.output_length, 1)
        self.status = RequestStatus.UNFINISHED
        self.error = ""
        self.ctx_target = self.prompt  # tokens the (re)prefill must hold: prompt, or prompt + generated
        self.computed = 0  # tokens of ctx_target in KV (cached or computed)
        self.cached_tokens = 0  # prompt tokens reused from a cache in the (first) prefill
        self.reserved = 0  # KV tokens reserved on the instance doing the prefill
        self.fetched_tokens = 0
        self.fetch_s = 0.0
        self.prefill_start_s = NAN
        self.prefill_end_s = NAN
        self.first_token_s = NAN
        self.finish_s = NAN
        self.est_work_s = 0.0
        self.generated = 0
        self.base_ctx = 0
        self.join_diter = -1
        self.finish_diter = -1
        self.decode_instance = ""
        self.prefill_instance = ""
        self.ranges: list[tuple[object, int, int]] = []  # (instance, first decode-iteration index, count)
        self.token_times: list[float] = []  # tokens produced outside decode iterations (prefill ends)
        self.kv_transfer_s = 0.0
        self.kv_transfer_bytes = 0.0
        self.preemptions = 0
        self.decode_start_s = NAN
        self.recomputing = False

    def to_record(self) -> RequestRecord:
        """The record of this request (token times gathered from the instances' iteration timelines)."""
        spec = self.spec
        times = [float(t) for t in self.token_times]  # event times may be NumPy floats (from the arrivals)
        if self.ranges:
            for inst, first, count in self.ranges:
                times += inst.iteration_list(first, count)  # type: ignore[attr-defined]
            times.sort()  # already in order unless a preempted sequence was recomputed
        ok = self.status == RequestStatus.OK
        extra = {
            "queue_s": self.prefill_start_s - spec.arrival_s if self.prefill_start_s == self.prefill_start_s else NAN,
            "prefill_s": self.prefill_end_s - self.prefill_start_s,
            "kv_transfer_s": self.kv_transfer_s,
            "kv_transfer_bytes": self.kv_transfer_bytes,
            "kv_fetch_s": self.fetch_s,
            "kv_fetched_tokens": float(self.fetched_tokens),
            "decode_s": self.finish_s - self.decode_start_s if ok else NAN,
            "preemptions": float(self.preemptions),
        }
        instance = self.prefill_instance
        if self.decode_instance and self.decode_instance != self.prefill_instance:
            instance = f"{self.prefill_instance}->{self.decode_instance}"
        return RequestRecord(
            request_id=spec.request_id, status=self.status, arrival_s=spec.arrival_s, sent_s=spec.arrival_s,
            first_token_s=self.first_token_s if len(times) else NAN,
            finish_s=self.finish_s, input_length=spec.input_length, output_length=spec.output_length,
            n_out=len(times), chunk_times_s=tuple(times), cached_tokens=self.cached_tokens,
            instance=instance, error=self.error, prefix_group=spec.prefix_group,
            shared_prefix_len=spec.shared_prefix_len, session_id=spec.session_id, turn=spec.turn, extra=extra,
        )
