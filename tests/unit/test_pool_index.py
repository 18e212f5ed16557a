"""The router's view of the Mooncake Store pool: key format, prefix counting and failure handling.

The store and the hasher are fakes; the test against vLLM's own block hashes runs only where vLLM is
installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from systems.router.pool_index import PoolIndex, store_key_prefix


class FakeHasher:
    """One 2-byte hash per full block: (block index, salt length)."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.calls: list[tuple[tuple[int, ...], str]] = []

    def hashes(self, token_ids: Sequence[int], cache_salt: str = "") -> list[bytes]:
        self.calls.append((tuple(token_ids), cache_salt))
        return [bytes([b, len(cache_salt)]) for b in range(len(token_ids) // self.block_size)]


class FakeStore:
    def __init__(self, answer: Any = None, error: Exception | None = None) -> None:
        self.answer = answer
        self.error = error
        self.asked: list[list[str]] = []

    def batch_is_exist(self, keys: list[str]) -> list[int]:
        self.asked.append(list(keys))
        if self.error is not None:
            raise self.error
        return list(self.answer)


def index(answer: Any = (), error: Exception | None = None, block_size: int = 4) -> PoolIndex:
    return PoolIndex("127.0.0.1:1", "model@tp_rank:0", block_size, store=FakeStore(answer, error),
                     hasher=FakeHasher(block_size))


def test_keys_are_prefix_at_hex_hash():
    pool = index()
    assert pool.keys(list(range(9)), "ab") == ["model@tp_rank:0@0002", "model@tp_rank:0@0102"]
    assert pool.hasher.calls[-1] == (tuple(range(9)), "ab")


def test_counts_the_leading_run_of_present_blocks():
    pool = index([1, 1, 0, 1])
    assert pool.cached_prefix_tokens(list(range(16))) == 8
    assert pool.store.asked == [pool.keys(list(range(16)))]
    assert pool.queries == 1 and pool.errors == 0


def test_all_present_and_none_present():
    assert index([1, 1, 1]).cached_prefix_tokens(list(range(12))) == 12
    assert index([0, 1, 1]).cached_prefix_tokens(list(range(12))) == 0


def test_negative_answer_stops_and_counts_an_error():
    pool = index([1, -1, 1])
    assert pool.cached_prefix_tokens(list(range(12))) == 4
    assert pool.errors == 1 and pool.queries == 1


def test_absent_block_is_not_an_error():
    pool = index([1, 0])
    pool.cached_prefix_tokens(list(range(8)))
    assert pool.errors == 0


def test_store_failure_means_an_empty_pool_and_an_error():
    pool = index(error=RuntimeError("master down"))
    assert pool.cached_prefix_tokens(list(range(8)), "t") == 0
    assert pool.errors == 1 and pool.queries == 1


def test_prompt_shorter_than_a_block_asks_nothing():
    pool = index([1])
    assert pool.cached_prefix_tokens([1, 2, 3]) == 0
    assert pool.store.asked == [] and pool.queries == 0


def test_store_key_prefix():
    assert store_key_prefix("tiny_llama-abc") == "tiny_llama-abc@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0"
    assert store_key_prefix("tiny_llama-abc", "ns") == "ns@tiny_llama-abc@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0"


@pytest.mark.integration  # importing vLLM starts processes (`file`, `uname -p`: tests/conftest.py)
def test_vllm_block_hasher():
    pytest.importorskip("vllm")
    from systems.router.pool_index import VllmBlockHasher

    hasher = VllmBlockHasher(4)
    prompt = list(range(100, 111))  # 2 full blocks + 3 tokens
    plain = hasher.hashes(prompt)
    assert len(plain) == 2 and all(isinstance(h, bytes) for h in plain)
    assert hasher.hashes(prompt) == plain
    assert hasher.hashes(prompt[:8]) == plain  # the partial block is never hashed
    assert hasher.hashes(prompt[:3]) == []
    salted = hasher.hashes(prompt, "tenant-a")
    assert salted[0] != plain[0] and salted[1] != plain[1]  # the salt is in block 0, and chained onward
    assert hasher.hashes(prompt, "tenant-b")[0] != salted[0]
    other = hasher.hashes([*prompt[:4], 1, 2, 3, 4])
    assert other[0] == plain[0] and other[1] != plain[1]
