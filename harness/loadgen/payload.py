"""Request bytes: the HTTP/1.1 request for each spec, encoded once (before the run when memory allows)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from harness.loadgen.config import LoadGenOptions, TargetConfig
from vocab.records import RequestSpec

USER_AGENT = "disagg-bench-loadgen/1"


def request_body(spec: RequestSpec, prompt: Any, model: str, extra_body: dict[str, Any]) -> bytes:
    """The JSON body of one streamed completion request (``extra_body`` keys override the defaults)."""
    ids = prompt.tolist() if hasattr(prompt, "tolist") else list(prompt)
    body: dict[str, Any] = {
        "model": model,
        "prompt": ids,
        "max_tokens": int(spec.output_length),
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "temperature": 0,
    }
    if spec.tenant:  # vLLM salts the tenant's prefix-cache hashes, so tenants never share KV
        body["cache_salt"] = spec.tenant
    body.update(extra_body)
    return json.dumps(body, separators=(",", ":")).encode()


class RequestEncoder:
    """Builds the complete request (head + body) of spec ``i``."""

    def __init__(
        self,
        specs: Sequence[RequestSpec],
        prompts: Sequence[Sequence[int]],
        target: TargetConfig,
        options: LoadGenOptions,
        host_header: str,
        path: str,
    ) -> None:
        self._specs = specs
        self._prompts = prompts
        self._model = target.model
        self._extra = dict(options.extra_body)
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {host_header}\r\nUser-Agent: {USER_AGENT}\r\n"
            "Accept: text/event-stream\r\nContent-Type: application/json\r\n"
        )
        if target.api_key:
            head += f"Authorization: Bearer {target.api_key}\r\n"
        self._head = head.encode("latin-1")

    def encode(self, i: int) -> bytes:
        spec = self._specs[i]
        body = request_body(spec, self._prompts[i], self._model, self._extra)
        # X-Request-Id lets a router's or engine's per-request log be joined to the record
        return b"%sX-Request-Id: %d\r\nContent-Length: %d\r\n\r\n%s" % (self._head, spec.request_id, len(body), body)

    def estimated_bytes(self, indices: Sequence[int]) -> int:
        """A rough upper bound of the bytes all requests in ``indices`` take (7 bytes per token id)."""
        return sum(len(self._head) + 300 + 7 * len(self._prompts[i]) for i in indices)
