"""The disaggregation scheduler as a plain policy over a hand-built cluster view (no simulator)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from systems.policies.pd import (
    DecodeView,
    PDScheduler,
    PrefillView,
    PrefixSource,
    decode_load,
    decode_overloaded,
)


@dataclass
class FakeView:
    """Prefill cost: 1 ms per computed token; loading: 0.1 ms per fetched token, local prefixes free."""

    prefills: list[PrefillView]
    decodes: list[DecodeView] = field(default_factory=lambda: [DecodeView("D0", 4, 10_000, 0.02, 0.02, 10_000)])
    pool_tokens: int = 0
    fetch_ms_per_token: float = 0.1

    def prefill_views(self):
        return self.prefills

    def decode_views(self, prompt_tokens, after_s):
        return self.decodes

    def global_prefix(self):
        return PrefixSource(self.pool_tokens, "pool" if self.pool_tokens else "")

    def prefill_time_s(self, index, prompt_tokens, cached_tokens):
        return (prompt_tokens - cached_tokens) * 1e-3

    def load_time_s(self, index, local_tokens, fetched_tokens):
        return fetched_tokens * self.fetch_ms_per_token * 1e-3


def p(name: str, queue_s: float, local: int) -> PrefillView:
    return PrefillView(name, queue_s, local, 0)


def test_conductor_picks_the_smallest_estimated_ttft() -> None:
    view = FakeView([p("P0", 0.5, 900), p("P1", 0.0, 0)])
    d = PDScheduler("conductor").choose(1000, view)
    # P0: 0.5 + 0.1 = 0.6 s; P1: 0 + 1.0 = 1.0 s
    assert d.prefill == 0 and d.reuse_tokens == 900 and d.fetch_tokens == 0
    assert d.est_ttft_s == pytest.approx(0.6)


def test_conductor_fetches_the_pool_prefix_when_it_beats_recomputing() -> None:
    view = FakeView([p("P0", 0.5, 900), p("P1", 0.0, 0)], pool_tokens=900)
    d = PDScheduler("conductor", kvcache_balancing_threshold=2.0).choose(1000, view)
    # P1 fetches 900 tokens (0.09 s) and computes 100 (0.1 s): 0.19 s beats P0's 0.6 s
    assert d.prefill == 1 and d.reuse_tokens == 900 and d.fetch_tokens == 900
    assert d.est_ttft_s == pytest.approx(0.19)


def test_balancing_threshold_keeps_the_local_prefix_when_it_is_close_to_the_best() -> None:
    # P0 holds 600 of the pool's 900: 900/600 = 1.5 < threshold 2, so P0 prices its local prefix only
    view = FakeView([p("P0", 0.0, 600)], pool_tokens=900)
    d = PDScheduler("conductor", kvcache_balancing_threshold=2.0).choose(1000, view)
    assert d.reuse_tokens == 600 and d.fetch_tokens == 0
    d = PDScheduler("conductor", kvcache_balancing_threshold=1.2).choose(1000, view)
    assert d.reuse_tokens == 900 and d.fetch_tokens == 300


def test_eq2_break_even_recomputes_when_loading_is_slower() -> None:
    view = FakeView([p("P0", 0.0, 0)], pool_tokens=900, fetch_ms_per_token=2.0)  # loading 2x dearer than computing
    d = PDScheduler("conductor", kvcache_balancing_threshold=1.0).choose(1000, view)
    assert d.reuse_tokens == 0 and d.fetch_tokens == 0


def test_local_cache_aware_ignores_the_pool_and_load_balancing_ignores_caches() -> None:
    view = FakeView([p("P0", 0.3, 900), p("P1", 0.0, 0)], pool_tokens=900)
    assert PDScheduler("local_cache_aware").choose(1000, view).prefill == 0  # 0.3 + 0.1 < 1.0
    assert PDScheduler("local_cache_aware").choose(1000, view).fetch_tokens == 0
    assert PDScheduler("load_balancing").choose(1000, view).prefill == 1


def test_rejection_modes() -> None:
    busy = [DecodeView("D0", 100, 10_000, 0.15, 0.05, 10_000)]  # overloaded now, fine when the prefill ends
    view = FakeView([p("P0", 0.0, 0)], decodes=busy)
    assert PDScheduler("conductor", rejection="none", tbt_slo_s=0.1).choose(1000, view).reject == ""
    assert PDScheduler("conductor", rejection="baseline", tbt_slo_s=0.1).choose(1000, view).reject == ""
    assert "overloaded" in PDScheduler("conductor", rejection="early", tbt_slo_s=0.1).choose(1000, view).reject
    assert PDScheduler("conductor", rejection="predictive", tbt_slo_s=0.1).choose(1000, view).reject == ""
    slow = FakeView([p("P0", 5.0, 0)])
    for mode in ("baseline", "early", "predictive"):
        assert "TTFT" in PDScheduler("conductor", rejection=mode, ttft_slo_s=2.0).choose(1000, slow).reject


def test_bad_names_are_errors() -> None:
    with pytest.raises(ValueError, match="unknown disaggregation policy"):
        PDScheduler("nearest")
    with pytest.raises(ValueError, match="unknown rejection mode"):
        PDScheduler(rejection="sometimes")


def test_decode_load_is_the_average_tbt_ratio_over_decode_instances() -> None:
    # Mooncake (arXiv v3 §7): the decode pool's load is the average TBT ratio over all decode instances,
    # so one idle instance does not hide an overloaded pool: (0.08 + 0.15) / 2 / 0.1 = 1.15 > 1
    decodes = [DecodeView("D0", 10, 10_000, 0.08, 0.04, 10_000), DecodeView("D1", 90, 10_000, 0.15, 0.05, 10_000)]
    assert decode_load(decodes, 0.1) == pytest.approx(1.15)
    assert decode_load(decodes, 0.1, predicted=True) == pytest.approx(0.45)
    assert decode_overloaded(decodes, 0.1) and not decode_overloaded(decodes, 0.1, predicted=True)
    assert not decode_overloaded(decodes, None)  # no TBT SLO: only KV room counts
    view = FakeView([p("P0", 0.0, 0)], decodes=decodes)
    assert "average TBT ratio 1.15" in PDScheduler("conductor", rejection="early", tbt_slo_s=0.1).choose(1000, view).reject
    assert PDScheduler("conductor", rejection="predictive", tbt_slo_s=0.1).choose(1000, view).reject == ""
    full = [DecodeView("D0", 10, -1, 0.01, 0.01, -1)]
    assert "no KV room" in PDScheduler("conductor", rejection="early", tbt_slo_s=0.1).choose(
        1000, FakeView([p("P0", 0.0, 0)], decodes=full)).reject


def test_prefix_match_takes_the_longest_own_prefix_whatever_the_queue() -> None:
    # FAST'25 §5.3.2's local setup: the node with the higher prefix-match ratio; ties to the shorter queue
    view = FakeView([p("P0", 0.0, 0), p("P1", 9.0, 600), p("P2", 1.0, 600)], pool_tokens=900)
    d = PDScheduler("prefix_match").choose(1000, view)
    assert d.prefill == 2 and d.reuse_tokens == 600 and d.fetch_tokens == 0
    assert d.est_ttft_s == pytest.approx(1.0 + 0.4)
    assert PDScheduler("local_cache_aware").choose(1000, view).prefill == 0  # 1.0 s (cold, idle) beats P2's 1.4 s
