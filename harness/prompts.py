"""Turning a workload into what a real engine is sent: token-id prompts that fit the model's context,
and the prefix-cache hit rate the workload itself predicts for an engine's KV block size.

The predicted hit rate is the infinite-cache case of :func:`systems.kvcache.replay_prefix_hits` (LRU,
no capacity), computed here with a few array operations: with nothing ever evicted, a request's hit is its
leading run of blocks that some earlier request holds. This keeps numba (the replay's kernels) out of every
serving run; ``tests/unit/test_process_outputs.py`` checks that both give the same hits."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from systems.config import ModelConfig
from vocab.records import RequestSpec
from workloads.base import WorkloadRequests, dense_block_ids
from workloads.tokens import VocabSpec, prompt_token_ids


def vocab_of(model_cfg: ModelConfig) -> VocabSpec:
    """The regular vocabulary of a model config (ids below ``vocab_size``, minus its special ids)."""
    return VocabSpec(vocab_size=int(model_cfg.vocab_size), special_token_ids=tuple(model_cfg.special_token_ids))


def build_prompts(specs: Sequence[RequestSpec], model_cfg: ModelConfig, seed: int = 0) -> list[list[int]]:
    """Token ids of every prompt, computed before the run (shared blocks give identical tokens)."""
    vocab = vocab_of(model_cfg)
    return [prompt_token_ids(spec, vocab, seed=seed).tolist() for spec in specs]


def _truncate(spec: RequestSpec, input_length: int) -> RequestSpec:
    n_blocks = math.ceil(input_length / spec.block_size)
    return dataclasses.replace(spec, input_length=input_length, hash_ids=spec.hash_ids[:n_blocks],
                               shared_prefix_len=min(spec.shared_prefix_len, input_length))


def fit_to_context(requests: WorkloadRequests, max_model_len: int) -> tuple[WorkloadRequests, dict[str, Any]]:
    """Shorten requests so prompt + output fit ``max_model_len`` tokens.

    The output is first capped at half the context, then the prompt is cut to what is left (whole hash
    blocks are dropped from its end, so sharing structure is kept). Returns the new requests and a
    record of what was capped, for the summary.
    """
    max_output = max(1, max_model_len // 2)
    specs, n_prompt_capped, n_output_capped = [], 0, 0
    for spec in requests.specs:
        if spec.input_length + spec.output_length <= max_model_len:  # fits: kept as it is
            specs.append(spec)
            continue
        out_len = spec.output_length
        if out_len > max_output:
            out_len, n_output_capped = max_output, n_output_capped + 1
        budget = max_model_len - out_len
        new = dataclasses.replace(spec, output_length=out_len) if out_len != spec.output_length else spec
        if spec.input_length > budget:
            new, n_prompt_capped = _truncate(new, budget), n_prompt_capped + 1
        specs.append(new)
    info = {"context_cap_tokens": max_model_len, "n_prompt_capped": n_prompt_capped,
            "n_output_capped": n_output_capped, "max_output_tokens_when_capped": max_output}
    return dataclasses.replace(requests, specs=tuple(specs)), info


def predicted_prefix_hit_rate(specs: Sequence[RequestSpec], engine_block_size: int) -> float:
    """Prompt-token hit rate of an infinite, single-instance prefix cache with ``engine_block_size`` blocks.

    A request can reuse the longest prefix it shares with any earlier request, in whole engine blocks,
    and never its last prompt token (an engine must compute at least one token), as vLLM does.
    """
    if not specs:
        return math.nan
    hit_blocks = infinite_cache_hit_blocks(specs)
    block = np.fromiter((s.block_size for s in specs), dtype=np.int64, count=len(specs))
    input_len = np.fromiter((s.input_length for s in specs), dtype=np.int64, count=len(specs))
    shared = np.minimum(hit_blocks * block, input_len - 1)
    reusable = (shared // engine_block_size) * engine_block_size
    return float(reusable.sum() / input_len.sum())


def infinite_cache_hit_blocks(specs: Sequence[RequestSpec]) -> np.ndarray:
    """Leading ``hash_ids`` of each request that an infinite prefix cache holds when it arrives: the longest
    run of its first blocks each of which an earlier request has (at any position), as
    ``replay_prefix_hits(..., capacity=None)`` counts them (a block repeated within the request does not
    hit: the lookup comes before the request inserts anything)."""
    n = len(specs)
    lengths = np.fromiter((len(s.hash_ids) for s in specs), dtype=np.int64, count=n)
    hits = np.zeros(n, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return hits
    dense = dense_block_ids(specs)  # 0..U-1
    first_seen = np.unique(dense, return_index=True)[1]  # flat position of each id's first reference
    starts = np.cumsum(lengths) - lengths
    request_start = np.repeat(starts, lengths)
    cached = first_seen[dense] < request_start  # an earlier request referenced it
    position = np.arange(total, dtype=np.int64) - request_start
    first_miss = np.where(cached, np.iinfo(np.int64).max, position)
    nonempty = lengths > 0
    # each reduceat segment runs from a non-empty request's start to the next one's: exactly its blocks
    hits[nonempty] = np.minimum(np.minimum.reduceat(first_miss, starts[nonempty]), lengths[nonempty])
    return hits
