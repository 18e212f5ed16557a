"""Token synthesis: deterministic, shared blocks identical, ids in range and never special; block rescaling."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vocab.records import RequestSpec
from workloads.tokens import VocabSpec, prompt_token_ids, scale_blocks

VOCAB = VocabSpec(vocab_size=32000, special_token_ids=(0, 1, 2, 31999))


def _spec(ids, length, bs=16, **kw) -> RequestSpec:
    return RequestSpec(
        request_id=0,
        arrival_s=0.0,
        input_length=length,
        output_length=8,
        hash_ids=tuple(ids),
        block_size=bs,
        **kw,
    )


def test_length_dtype_and_determinism():
    spec = _spec([5, 6, 7], 40)
    tokens = prompt_token_ids(spec, VOCAB)
    assert tokens.shape == (40,) and tokens.dtype == np.int32
    assert np.array_equal(tokens, prompt_token_ids(spec, VOCAB))
    assert not np.array_equal(tokens, prompt_token_ids(spec, VOCAB, seed=1))
    assert len(np.unique(tokens)) > 30  # not a constant fill


def test_same_hash_id_same_tokens_everywhere():
    a = prompt_token_ids(_spec([1, 2, 3], 48), VOCAB)
    b = prompt_token_ids(_spec([1, 2, 9, 4], 60), VOCAB)
    assert np.array_equal(a[:32], b[:32])
    assert not np.array_equal(a[32:48], b[32:48])
    c = prompt_token_ids(_spec([2, 1], 32), VOCAB)  # the same blocks at other positions
    assert np.array_equal(c[:16], a[16:32]) and np.array_equal(c[16:], a[:16])
    assert not np.array_equal(a[:16], a[16:32])  # different ids, different content


def test_last_block_is_truncated():
    full = prompt_token_ids(_spec([1, 2, 3], 48), VOCAB)
    part = prompt_token_ids(_spec([1, 2, 3], 35), VOCAB)
    assert np.array_equal(part, full[:35])


def test_bounds_and_special_ids_avoided():
    vocab = VocabSpec(vocab_size=12, special_token_ids=(0, 5, 11, 50, 5), min_token_id=1)
    tokens = prompt_token_ids(_spec(range(200), 200 * 16), vocab)
    assert set(tokens.tolist()) == {1, 2, 3, 4, 6, 7, 8, 9, 10}
    counts = np.bincount(tokens, minlength=12)[[1, 2, 3, 4, 6, 7, 8, 9, 10]]
    assert counts.min() > 0.85 * counts.mean()  # close to uniform over the allowed ids
    big = prompt_token_ids(_spec(range(100), 1600), VocabSpec(vocab_size=50000, min_token_id=100))
    assert big.min() >= 100 and big.max() < 50000


def test_allowed_id_mapping_matches_explicit_list():
    rng = np.random.default_rng(0)
    specials = tuple(int(x) for x in rng.integers(0, 300, size=40))
    vocab = VocabSpec(vocab_size=256, special_token_ids=specials, min_token_id=3)
    allowed = np.setdiff1d(np.arange(3, 256), np.array(specials))
    assert vocab.n_allowed == len(allowed)
    assert np.array_equal(vocab.allowed_id(np.arange(vocab.n_allowed)), allowed)


def test_vocab_and_spec_validation():
    with pytest.raises(ValueError, match="every id"):
        VocabSpec(vocab_size=3, special_token_ids=(0, 1, 2))
    with pytest.raises(ValueError, match="min_token_id"):
        VocabSpec(vocab_size=3, min_token_id=3)
    with pytest.raises(ValueError, match=r"expected ceil\(40 / 16\) = 3"):
        prompt_token_ids(_spec([1, 2], 40), VOCAB)
    assert VocabSpec(vocab_size=10, special_token_ids=[1, 2]).special_token_ids == (1, 2)


def test_long_prompt_is_block_for_block_the_short_ones():
    # its speed target (under 0.5 s) is a benchmark: tests/bench/test_speed_targets.py
    spec = _spec(range(250), 128_000, bs=512)
    tokens = prompt_token_ids(spec, VOCAB)
    assert len(tokens) == 128_000
    head = prompt_token_ids(_spec(range(3), 3 * 512, bs=512), VOCAB)
    assert list(tokens[: 3 * 512]) == list(head)  # the same blocks give the same tokens, however long the prompt


def test_scale_blocks_keeps_block_count():
    spec = _spec(range(14), 6758, bs=512, shared_prefix_len=1100, prefix_group=3)
    scaled = scale_blocks(spec, 16)
    # 13 full blocks -> 13 * 16; last block 102 tokens -> ceil(102 * 16 / 512) = 4
    assert scaled.input_length == 13 * 16 + 4 and scaled.block_size == 16
    assert scaled.hash_ids == spec.hash_ids and scaled.n_blocks == 14
    assert scaled.shared_prefix_len == 2 * 16 + math.ceil(76 * 16 / 512)
    assert scaled.output_length == spec.output_length and scaled.prefix_group == 3
    assert scale_blocks(spec, 512) == spec
    up = scale_blocks(_spec([1, 2], 20, bs=16), 64)
    assert up.input_length == 64 + 16 and up.n_blocks == 2


@pytest.mark.parametrize(("bs", "bt"), [(512, 16), (16, 128), (100, 7), (7, 100)])
def test_scale_blocks_property(bs, bt):
    for length in range(1, 5 * bs + 1, max(1, bs // 13)):
        n_blocks = math.ceil(length / bs)
        scaled = scale_blocks(_spec(range(n_blocks), length, bs=bs), bt)
        assert scaled.n_blocks == n_blocks
        assert scaled.input_length == (n_blocks - 1) * bt + math.ceil(
            (length - (n_blocks - 1) * bs) * bt / bs
        )
    with pytest.raises(ValueError):
        scale_blocks(_spec([1], 5, bs=bs), 0)
