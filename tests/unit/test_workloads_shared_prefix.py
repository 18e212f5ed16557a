"""Shared-prefix generator: counts, Zipf skew, multi-turn prefixes at token level, ids, determinism."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pytest

from workloads.config import ArrivalConfig, SharedPrefixConfig
from workloads.errors import WorkloadError
from workloads.shared_prefix import SharedPrefixWorkload, generate_shared_prefix, zipf_weights
from workloads.tokens import VocabSpec, prompt_token_ids


def _cfg(**kw) -> SharedPrefixConfig:
    kw.setdefault("arrival", ArrivalConfig(kind="poisson", rate_rps=5.0))
    return SharedPrefixConfig(name="sp", kind="shared_prefix", **kw)


def _requests(**kw):
    return SharedPrefixWorkload(_cfg(**kw)).requests()


def test_counts_and_exact_groups_without_zipf():
    req = _requests(num_groups=5, prompts_per_group=7, turns=3)
    assert len(req.specs) == 5 * 7 * 3
    sessions_per_group = Counter(s.prefix_group for s in req.specs if s.turn == 0)
    assert sessions_per_group == dict.fromkeys(range(5), 7)
    assert req.stats["group_session_counts"] == [7] * 5
    assert Counter(s.session_id for s in req.specs) == dict.fromkeys(range(35), 3)
    assert [s.request_id for s in req.specs] == list(range(105))


def test_zipf_skew_follows_the_law():
    cfg = _cfg(num_groups=6, prompts_per_group=500, zipf_alpha=1.2)
    counts = np.array(generate_shared_prefix(cfg).stats["group_session_counts"])
    assert counts.sum() == 3000
    assert all(counts[:-1] > counts[1:])  # rank 1 most popular, strictly decreasing here
    expected = zipf_weights(6, 1.2) * 3000
    assert np.all(np.abs(counts - expected) < 4 * np.sqrt(expected) + 1)
    assert counts[0] / counts[-1] == pytest.approx(6**1.2, rel=0.35)


def test_prompt_layout_and_lengths():
    req = _requests(
        num_groups=3,
        prompts_per_group=2,
        shared_prefix_len=64,
        question_len=32,
        output_len=16,
        turns=3,
        block_size=16,
    )
    for s in req.specs:
        assert s.input_length == 64 + s.turn * (32 + 16) + 32
        assert len(s.hash_ids) == s.input_length // 16
        assert s.shared_prefix_len == 64 and s.output_length == 16 and s.block_size == 16
    prefixes = defaultdict(set)
    for s in req.specs:
        prefixes[s.prefix_group].add(s.hash_ids[:4])
    assert all(len(v) == 1 for v in prefixes.values())
    assert len({next(iter(v)) for v in prefixes.values()}) == 3
    # Question/answer blocks never collide with any prefix block, nor across sessions.
    prefix_ids = {h for v in prefixes.values() for p in v for h in p}
    owners = defaultdict(set)
    for s in req.specs:
        for h in s.hash_ids[4:]:
            owners[h].add(s.session_id)
    assert not prefix_ids & set(owners) and all(len(o) == 1 for o in owners.values())


def test_turns_keep_order_and_sessions_interleave():
    req = _requests(num_groups=4, prompts_per_group=4, turns=4)
    seen: dict[int, int] = {}
    for s in req.specs:
        assert s.turn == seen.get(s.session_id, -1) + 1
        seen[s.session_id] = s.turn
    order = [s.session_id for s in req.specs]
    assert order != sorted(order)
    assert len({s.session_id for s in req.specs[:16]}) > 4  # not one session after another


def test_multi_turn_prompt_extends_previous_turn_at_token_level():
    req = _requests(
        num_groups=2,
        prompts_per_group=3,
        shared_prefix_len=48,
        question_len=32,
        output_len=16,
        turns=3,
        block_size=16,
    )
    vocab = VocabSpec(vocab_size=32000, special_token_ids=(0, 1, 2))
    by_session = defaultdict(dict)
    for s in req.specs:
        by_session[s.session_id][s.turn] = prompt_token_ids(s, vocab, seed=3)
    for turns in by_session.values():
        for t in range(1, 3):
            prev, cur = turns[t - 1], turns[t]
            assert len(cur) == len(prev) + 16 + 32
            assert np.array_equal(cur[: len(prev)], prev)
            assert not np.array_equal(cur[len(prev) : len(prev) + 16], cur[len(prev) + 16 : len(prev) + 32])
    group_of = {s.session_id: s.prefix_group for s in req.specs}
    sessions = list(by_session)
    same = [s for s in sessions if group_of[s] == group_of[sessions[0]]]
    other = [s for s in sessions if group_of[s] != group_of[sessions[0]]]
    assert np.array_equal(by_session[same[0]][0][:48], by_session[same[1]][0][:48])
    assert not np.array_equal(by_session[same[0]][0][:48], by_session[other[0]][0][:48])
    assert not np.array_equal(by_session[same[0]][0][48:], by_session[same[1]][0][48:])


def test_infinite_cache_hit_rate_matches_the_layout():
    # One turn, no skew: all but the first session of each group hit the whole prefix, nothing else.
    req = _requests(num_groups=4, prompts_per_group=5, shared_prefix_len=160, question_len=32, block_size=16)
    prefix_blocks, question_blocks, sessions = 10, 2, 20
    expected = (sessions - 4) * prefix_blocks / (sessions * (prefix_blocks + question_blocks))
    assert req.stats["prefix_hit_rate_blocks"] == pytest.approx(expected)


def test_determinism_and_seed_isolation():
    base = _requests(turns=2, zipf_alpha=0.8)
    again = _requests(turns=2, zipf_alpha=0.8)
    assert base.specs == again.specs
    other_gen = _requests(turns=2, zipf_alpha=0.8, seed=1)
    assert [s.hash_ids for s in other_gen.specs] != [s.hash_ids for s in base.specs]
    assert [s.arrival_s for s in other_gen.specs] == [s.arrival_s for s in base.specs]
    other_arrivals = _requests(
        turns=2, zipf_alpha=0.8, arrival=ArrivalConfig(kind="poisson", rate_rps=5.0, seed=9)
    )
    assert [s.hash_ids for s in other_arrivals.specs] == [s.hash_ids for s in base.specs]
    assert [s.arrival_s for s in other_arrivals.specs] != [s.arrival_s for s in base.specs]


def test_max_input_len_is_an_error_not_a_drop():
    with pytest.raises(WorkloadError) as info:
        _requests(shared_prefix_len=1024, question_len=128, output_len=64, turns=4, max_input_len=1500)
    msg = str(info.value)
    first_long = next(
        s
        for s in _requests(shared_prefix_len=1024, question_len=128, output_len=64, turns=4).specs
        if s.input_length > 1500
    )
    assert (
        f"session {first_long.session_id} turn {first_long.turn} has a {first_long.input_length}-token prompt"
        in msg
    )
    assert "turn 2 and later" in msg
    for key in ("workload.max_input_len", "workload.turns", "workload.shared_prefix_len"):
        assert key in msg
    exact = _requests(shared_prefix_len=1024, question_len=128, output_len=64, turns=4, max_input_len=1728)
    assert max(s.input_length for s in exact.specs) == 1728


def test_closed_loop_and_truncation():
    req = _requests(turns=2, max_requests=10, arrival=ArrivalConfig(kind="closed_loop", concurrency=3))
    assert len(req.specs) == 10 and all(s.arrival_s == 0.0 for s in req.specs)
    assert req.schedule.mode == "closed" and req.schedule.concurrency == 3
