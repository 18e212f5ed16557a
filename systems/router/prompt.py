"""Turn an OpenAI-style request body into the :class:`RouteRequest` a routing policy sees.

How the prompt is hashed (``block_size`` is the engine's KV block size in tokens):

* ``/v1/completions`` with ``prompt`` a list of token ids: the chained hashes of its full
  ``block_size``-token blocks (:func:`systems.policies.block_hashes`), exactly what the simulator
  computes for the same tokens; ``n_prompt_tokens`` is the number of ids.
* ``prompt`` a string: the router has no tokenizer, so it hashes the prompt's UTF-8 bytes in full chunks
  of ``block_size * TEXT_BYTES_PER_TOKEN`` bytes (:func:`systems.policies.byte_block_hashes`) and
  estimates ``n_prompt_tokens`` as ``ceil(bytes / TEXT_BYTES_PER_TOKEN)``. Prompts that share a text
  prefix share leading hashes, which is all prefix matching needs.
* A batch (a list of strings or of token lists): hashed by its first prompt; tokens are summed.
* ``/v1/chat/completions`` ``messages``: each message becomes ``role \\x1f content \\x1e`` (a list
  content contributes its ``text`` parts; other parts their sorted-key JSON), and the concatenated
  bytes are hashed like a text prompt. Chats that share leading messages share leading hashes.
* Anything else (no prompt, a body that is not JSON): no hashes and 0 tokens; the request is still
  routed (policies fall back to load) and the backend answers it.

``cache_salt`` (vLLM's per-request prefix-cache isolation field), when present, salts the hashes and is
the request's tenant, so tenants never match each other's prefixes, just as in the engine.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from systems.policies import RouteRequest, block_hashes, byte_block_hashes

__all__ = ["TEXT_BYTES_PER_TOKEN", "route_request_from_body", "route_request_from_json"]

logger = logging.getLogger(__name__)

TEXT_BYTES_PER_TOKEN = 4  # rough bytes per token of English text; only sets the text chunk size


def _text_route(text_bytes: bytes, block_size: int, salt: str) -> tuple[tuple[int, ...], int]:
    hashes = byte_block_hashes(text_bytes, block_size * TEXT_BYTES_PER_TOKEN, salt)
    return hashes, math.ceil(len(text_bytes) / TEXT_BYTES_PER_TOKEN)


def _is_token_list(value: Any) -> bool:
    return isinstance(value, list) and len(value) > 0 and isinstance(value[0], int)


def _prompt_route(prompt: Any, block_size: int, salt: str) -> tuple[tuple[int, ...], int]:
    if isinstance(prompt, str):
        return _text_route(prompt.encode("utf-8"), block_size, salt)
    if _is_token_list(prompt):
        return block_hashes(prompt, block_size, salt), len(prompt)
    if isinstance(prompt, list) and prompt:  # batch: route by the first prompt, count all tokens
        hashes, n_tokens = _prompt_route(prompt[0], block_size, salt)
        return hashes, n_tokens + sum(_n_tokens(p) for p in prompt[1:])
    return (), 0


def _n_tokens(prompt: Any) -> int:
    if isinstance(prompt, str):
        return math.ceil(len(prompt.encode("utf-8")) / TEXT_BYTES_PER_TOKEN)
    return len(prompt) if isinstance(prompt, list) else 0


def _message_bytes(messages: list[Any]) -> bytes:
    parts: list[str] = []
    for msg in messages:
        if not isinstance(msg, dict):
            continue
        content = msg.get("content")
        if isinstance(content, list):
            content = "".join(
                p["text"]
                if isinstance(p, dict) and isinstance(p.get("text"), str)
                else json.dumps(p, sort_keys=True)
                for p in content
            )
        elif not isinstance(content, str):
            content = "" if content is None else json.dumps(content, sort_keys=True)
        parts.append(f"{msg.get('role', '')}\x1f{content}\x1e")
    return "".join(parts).encode("utf-8")


def route_request_from_json(body: Any, request_id: int | str, block_size: int) -> RouteRequest:
    """The :class:`RouteRequest` for a parsed request body (see the module docstring for the rules)."""
    if not isinstance(body, dict):
        return RouteRequest(request_id, (), 0)
    salt = body.get("cache_salt")
    salt = salt if isinstance(salt, str) else ""
    try:
        if "prompt" in body:
            hashes, n_tokens = _prompt_route(body["prompt"], block_size, salt)
        elif isinstance(body.get("messages"), list):
            hashes, n_tokens = _text_route(_message_bytes(body["messages"]), block_size, salt)
        else:
            hashes, n_tokens = (), 0
    except ValueError as exc:  # e.g. token ids out of range: route by load, let the backend reject it
        logger.debug("request %s: prompt not hashable (%s)", request_id, exc)
        hashes, n_tokens = (), 0
    return RouteRequest(request_id, hashes, n_tokens, tenant=salt)


def route_request_from_body(body: bytes, request_id: int | str, block_size: int) -> RouteRequest:
    """The :class:`RouteRequest` for raw request bytes; a body that is not JSON gets no hashes."""
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        logger.debug("request %s: body is not JSON; routing by load only", request_id)
        return RouteRequest(request_id, (), 0)
    return route_request_from_json(parsed, request_id, block_size)
