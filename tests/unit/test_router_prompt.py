"""How the router turns request bodies into RouteRequests (token ids, text, batches, chat, salts, junk)."""

from __future__ import annotations

import json

from systems.policies import block_hashes, byte_block_hashes
from systems.router import TEXT_BYTES_PER_TOKEN, route_request_from_body, route_request_from_json


def body(**fields) -> bytes:
    return json.dumps(fields).encode()


def test_token_prompt_hashes_full_blocks_like_the_simulator() -> None:
    tokens = list(range(300))
    r = route_request_from_body(body(prompt=tokens, max_tokens=4), 7, 128)
    assert r.request_id == 7 and r.n_prompt_tokens == 300 and r.tenant == ""
    assert r.block_hashes == block_hashes(tokens, 128) and len(r.block_hashes) == 2


def test_cache_salt_is_the_tenant_and_salts_the_hashes() -> None:
    tokens = list(range(256))
    r = route_request_from_json({"prompt": tokens, "cache_salt": "acme"}, 0, 128)
    assert r.tenant == "acme" and r.block_hashes == block_hashes(tokens, 128, "acme")


def test_text_prompt_hashes_utf8_chunks() -> None:
    text = "é" * 600  # 1200 bytes
    r = route_request_from_json({"prompt": text}, 0, 128)
    assert r.block_hashes == byte_block_hashes(text.encode(), 128 * TEXT_BYTES_PER_TOKEN)
    assert len(r.block_hashes) == 2 and r.n_prompt_tokens == 300


def test_batch_routes_by_first_prompt_and_counts_all() -> None:
    r = route_request_from_json({"prompt": [list(range(256)), [1, 2, 3]]}, 0, 128)
    assert r.block_hashes == block_hashes(list(range(256)), 128) and r.n_prompt_tokens == 259
    r = route_request_from_json({"prompt": ["a" * 1024, "bb"]}, 0, 128)
    assert len(r.block_hashes) == 2 and r.n_prompt_tokens == 257


def test_chats_sharing_leading_messages_share_leading_hashes() -> None:
    system = {"role": "system", "content": "You are terse. " * 200}
    a = route_request_from_json({"messages": [system, {"role": "user", "content": "hi"}]}, 0, 16)
    b = route_request_from_json(
        {"messages": [system, {"role": "user", "content": [{"type": "text", "text": "other question"}]}]},
        1,
        16,
    )
    assert len(a.block_hashes) >= 40
    shared = sum(1 for x, y in zip(a.block_hashes, b.block_hashes, strict=False) if x == y)
    assert shared >= 40 and a.n_prompt_tokens > 0


def test_bodies_without_a_usable_prompt_route_by_load() -> None:
    for raw in (b"not json", b"[1, 2]", body(max_tokens=3), body(prompt=[2**70] * 300), b"\xff\xfe"):
        r = route_request_from_body(raw, 3, 128)
        assert r.block_hashes == () and r.request_id == 3
