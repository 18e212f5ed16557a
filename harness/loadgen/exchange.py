"""One request from issue to record: receives the HTTP response callbacks and classifies the outcome.

HTTP 200 with at least one token and a finish reason is ``ok``; 429 is ``rejected``; any other status,
a broken connection, a malformed stream or one without tokens or finish reason is ``failed``. Requests cut
at the drain deadline are ``unfinished``. Times are kept as raw ``perf_counter()`` values until
``to_record`` subtracts the run's origin.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Optional

from harness.loadgen.completion_stream import CompletionStream
from harness.loadgen.connection import HTTPConnection
from harness.loadgen.sse import SSEError, SSEParser
from vocab.records import RequestRecord, RequestSpec, RequestStatus

NAN = math.nan
MAX_ERROR_BODY = 400


class Exchange:
    """State of one issued request; calls ``on_done(self)`` once when it ends (or ``on_retry(self)``)."""

    __slots__ = (
        "index", "spec", "arrival_s", "issued", "sent", "conn", "http_status", "instance", "sse", "stream",
        "error_body", "end", "status", "error", "retries", "_on_done", "_on_retry",
    )

    def __init__(
        self,
        index: int,
        spec: RequestSpec,
        arrival_s: float,
        issued: float,
        on_done: Callable[[Exchange], None],
        on_retry: Callable[[Exchange], None],
    ) -> None:
        self.index = index
        self.spec = spec
        self.arrival_s = arrival_s  # relative to t0 (exact schedule value for open loops)
        self.issued = issued
        self.sent = NAN
        self.conn: Optional[HTTPConnection] = None
        self.http_status = 0
        self.instance = ""
        self.sse = SSEParser()
        self.stream = CompletionStream()
        self.error_body = b""
        self.end = NAN
        self.status: Optional[RequestStatus] = None
        self.error = ""
        self.retries = 0
        self._on_done = on_done
        self._on_retry = on_retry

    @property
    def finished(self) -> bool:
        return self.status is not None

    def reset_for_retry(self) -> None:
        self.conn = None
        self.http_status = 0
        self.sse = SSEParser()
        self.stream = CompletionStream()
        self.error_body = b""
        self.retries += 1

    # -- response callbacks (from HTTPConnection) --------------------------------------------------------
    def on_head(self, status: int, headers: dict[str, str]) -> None:
        self.http_status = status
        self.instance = headers.get("x-instance", "")

    def on_body(self, data: bytes, t: float) -> None:
        if self.http_status != 200:
            if len(self.error_body) < MAX_ERROR_BODY:
                self.error_body += data[: MAX_ERROR_BODY - len(self.error_body)]
            return
        try:
            events = self.sse.feed(data)
        except SSEError as exc:
            self.stream.error = self.stream.error or str(exc)
            return
        on_event = self.stream.on_event
        for event in events:
            on_event(event, t)

    def on_end(self, t: float) -> None:
        if self.finished:
            return
        code = self.http_status
        if code == 200:
            for event in self.sse.close():
                self.stream.on_event(event, t)
            failure = self.stream.failure()
            done = self.stream.done_s
            self.end = t if math.isnan(done) else done
            self._finish(RequestStatus.FAILED if failure else RequestStatus.OK, failure)
            return
        self.end = t
        snippet = self.error_body.decode("utf-8", "replace").strip().replace("\n", " ")
        status = RequestStatus.REJECTED if code == 429 else RequestStatus.FAILED
        self._finish(status, f"HTTP {code}: {snippet}" if snippet else f"HTTP {code}")

    def on_fail(self, reason: str, t: float, retryable: bool) -> None:
        if self.finished:
            return
        if retryable and self.retries == 0:
            self._on_retry(self)
            return
        self.end = t
        self._finish(RequestStatus.FAILED, reason)

    # -- outcomes decided by the runner ------------------------------------------------------------------
    def cut(self, status: RequestStatus, reason: str, t: float) -> None:
        """End the request now (timeout or drain deadline), dropping its connection."""
        if self.finished:
            return
        if self.conn is not None:
            self.conn.detach()
        self.end = t if status == RequestStatus.FAILED else NAN
        self._finish(status, reason)

    def _finish(self, status: RequestStatus, error: str) -> None:
        self.status = status
        self.error = error
        self.conn = None
        self._on_done(self)

    def to_record(self, t0: float) -> RequestRecord:
        spec = self.spec
        stream = self.stream
        chunks = tuple(t - t0 for t in stream.chunk_times)
        return RequestRecord(
            request_id=spec.request_id,
            status=self.status or RequestStatus.UNFINISHED,
            arrival_s=self.arrival_s,
            sent_s=self.sent - t0,
            first_token_s=chunks[0] if chunks else NAN,
            finish_s=self.end - t0,
            input_length=spec.input_length,
            output_length=spec.output_length,
            n_out=stream.n_out,
            chunk_times_s=chunks,
            cached_tokens=stream.cached_tokens,
            instance=self.instance,
            error=self.error,
            prefix_group=spec.prefix_group,
            shared_prefix_len=spec.shared_prefix_len,
            session_id=spec.session_id,
            turn=spec.turn,
        )


def unsent_record(spec: RequestSpec, arrival_s: float, reason: str) -> RequestRecord:
    """The record of a request that was never sent (issuing stopped before it was due)."""
    return RequestRecord(
        request_id=spec.request_id,
        status=RequestStatus.UNFINISHED,
        arrival_s=arrival_s,
        sent_s=NAN,
        first_token_s=NAN,
        finish_s=NAN,
        input_length=spec.input_length,
        output_length=spec.output_length,
        n_out=0,
        error=reason,
        prefix_group=spec.prefix_group,
        shared_prefix_len=spec.shared_prefix_len,
        session_id=spec.session_id,
        turn=spec.turn,
    )
