"""Follows one streamed OpenAI ``/v1/completions`` response, event by event, and keeps what a record needs.

A chunk *carries tokens* when one of its choices has non-empty ``text`` or ``token_ids``, or has no
``finish_reason`` yet (servers send a non-final choice only for new tokens, even when its text is empty,
e.g. vLLM with ``--skip-tokenizer-init``). ``n_out`` is ``usage.completion_tokens`` when the final usage
chunk reports it, else the number of token-carrying chunks.

Fast path: a compact JSON object with exactly one ``"finish_reason"`` key, whose value is ``null``, and a
``null`` or absent ``usage`` is a plain token chunk; it is counted without being decoded (JSON escapes
every quote inside strings, so that key text cannot come from generated text). Anything else is decoded.
"""

from __future__ import annotations

import json
import math
from typing import Any

from harness.loadgen.sse import SSEEvent

_DONE = b"[DONE]"
_decode_json = json.JSONDecoder().decode
_FINISH_KEY = b'"finish_reason"'
_FINISH_NULL = b'"finish_reason":null'
_USAGE_KEY = b'"usage"'
_USAGE_NULL = b'"usage":null'
# finish reasons that end a stream without its completion: vLLM and SGLang close a request their engine aborted
# (a shutdown, the loss of the node decoding it) with "abort" and [DONE], as a finished stream ends
FAILED_FINISH_REASONS = frozenset({"abort", "error"})


def _error_text(obj: Any) -> str:
    if isinstance(obj, dict):
        for key in ("message", "detail", "error"):
            if key in obj:
                return _error_text(obj[key])
    return str(obj)[:300]


class CompletionStream:
    """Token chunk times, finish reason, usage and the first stream-level error of one response."""

    __slots__ = ("chunk_times", "finish_reason", "completion_tokens", "cached_tokens", "error", "done_s")

    def __init__(self) -> None:
        self.chunk_times: list[float] = []
        self.finish_reason: str | None = None
        self.completion_tokens = -1
        self.cached_tokens = -1
        self.error = ""
        self.done_s = math.nan  # time of "data: [DONE]"

    def on_event(self, event: SSEEvent, t: float) -> None:
        """Account for one event that arrived at time ``t``."""
        data = event.data
        if (
            data[:1] == b"{"
            and data[-1:] == b"}"
            and _FINISH_NULL in data
            and data.count(_FINISH_KEY) == 1
            and (_USAGE_NULL in data or _USAGE_KEY not in data)
        ):
            self.chunk_times.append(t)
            return
        if data == _DONE:
            if math.isnan(self.done_s):
                self.done_s = t
            return
        if event.event == "error":
            self._fail(f"error event: {data[:300].decode('utf-8', 'replace')}")
            return
        try:
            obj = _decode_json(data.decode("utf-8"))
        except ValueError:
            self._fail(f"malformed event data: {data[:120]!r}")
            return
        if not isinstance(obj, dict):
            self._fail(f"malformed event data: {data[:120]!r}")
            return
        if "error" in obj or obj.get("object") == "error":
            self._fail(f"error in stream: {_error_text(obj)}")
            return
        choices = obj.get("choices")
        if choices:
            tokens = False
            for choice in choices:
                reason = choice.get("finish_reason")
                if reason is not None:
                    self.finish_reason = str(reason)
                    if choice.get("text") or choice.get("token_ids"):
                        tokens = True
                else:
                    tokens = True
            if tokens:
                self.chunk_times.append(t)
        usage = obj.get("usage")
        if usage:
            n = usage.get("completion_tokens")
            if isinstance(n, int):
                self.completion_tokens = n
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
                self.cached_tokens = details["cached_tokens"]

    def _fail(self, message: str) -> None:
        if not self.error:
            self.error = message

    @property
    def n_out(self) -> int:
        """Output tokens: usage.completion_tokens when reported, else token-carrying chunks."""
        return self.completion_tokens if self.completion_tokens >= 0 else len(self.chunk_times)

    def failure(self) -> str:
        """Why a completed stream is not a success ("" when it is one): an error, no tokens, no finish reason, or
        one of :data:`FAILED_FINISH_REASONS`."""
        if self.error:
            return self.error
        if not self.chunk_times:
            return "stream carried no tokens"
        if self.finish_reason is None:
            return "stream ended without a finish_reason"
        if self.finish_reason in FAILED_FINISH_REASONS:
            return f"the server ended the stream with finish_reason {self.finish_reason!r} after {self.n_out} tokens"
        return ""
