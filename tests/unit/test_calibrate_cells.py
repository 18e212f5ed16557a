"""Calibration cells: which cells are measured, and how records become fitting samples (the engine's
iterations told apart by their first tokens, decode steps robust to a client that reads tokens in bursts)."""

from __future__ import annotations

import math

import pytest

from harness.calibrate.cells import (
    Cell,
    CellFailed,
    FreshIds,
    cell_medians,
    cell_requests,
    decode_cells,
    decode_sample,
    decode_step_means,
    iterations,
    prefill_cells,
    prefill_samples,
    transfer_samples,
)
from vocab.records import RequestRecord, RequestStatus


def record(i: int, sent: float, first: float, chunks: tuple[float, ...] = (), status=RequestStatus.OK,
           extra: dict | None = None, n: int = 512) -> RequestRecord:
    chunks = chunks or (first,)
    return RequestRecord(request_id=i, status=status, arrival_s=0.0, sent_s=sent, first_token_s=first,
                         finish_s=chunks[-1], input_length=n, output_length=len(chunks), n_out=len(chunks),
                         chunk_times_s=chunks, extra=extra or {})


def test_prefill_cells_fit_one_iteration_of_the_token_budget() -> None:
    cells = prefill_cells([2048, 512, 64], [4, 1, 2], token_budget=2048)
    assert [(c.tokens, c.batch) for c in cells] == [(64, 1), (64, 2), (64, 4), (512, 1), (512, 2), (512, 4),
                                                    (2048, 1)]
    assert [(c.tokens, c.batch, c.output_tokens) for c in decode_cells([128], [1, 8], 32)] == [(128, 1, 32),
                                                                                               (128, 8, 32)]


def test_cell_requests_never_share_a_block_and_arrive_together() -> None:
    ids = FreshIds()
    first = cell_requests(Cell("prefill", 3, 100), ids)
    second = cell_requests(Cell("decode", 2, 40, 8), ids, closed_loop=True)
    blocks = [h for r in (*first.specs, *second.specs) for h in r.hash_ids]
    assert len(blocks) == len(set(blocks)) == 3 * 7 + 2 * 3
    assert all(s.arrival_s == 0.0 for s in first.specs) and first.schedule.mode == "open"
    assert second.schedule.mode == "closed" and second.schedule.concurrency == 1
    assert [s.output_length for s in second.specs] == [8, 8]


def test_first_tokens_are_grouped_by_the_iteration_that_made_them() -> None:
    # the first request ran alone (10 ms), the other three together in the next iteration (+30 ms)
    recs = [record(0, 0.0, 0.010), record(1, 0.0001, 0.0400), record(2, 0.0002, 0.0401), record(3, 0.0002, 0.0402)]
    groups = iterations(recs)
    assert [len(g) for g in groups] == [1, 3]
    samples = prefill_samples(recs, Cell("prefill", 4, 512))
    assert [s["span"] for s in samples] == ["send", "iteration"]
    assert samples[0]["time_ms"] == pytest.approx(10.0) and samples[0]["sum_tokens"] == 512
    assert samples[1]["time_ms"] == pytest.approx(30.2) and samples[1]["sum_tokens"] == 3 * 512
    assert samples[1]["sum_sq_tokens"] == 3 * 512 ** 2 and samples[1]["cell_batch"] == 4


def test_decode_step_is_the_span_over_the_count_after_the_batch_formed() -> None:
    # two requests; the client read some tokens in bursts (equal stamps), which must not change the mean step
    a = record(0, 0.0, 0.010, (0.010, 0.013, 0.016, 0.016, 0.022, 0.025))
    b = record(1, 0.0, 0.013, (0.013, 0.016, 0.019, 0.019, 0.025, 0.028))
    assert decode_step_means([a, b]) == pytest.approx([0.003, 0.003])
    sample = decode_sample([a, b], Cell("decode", 2, 100, 6))
    assert sample["time_ms"] == pytest.approx(3.0) and sample["sum_context"] == 2 * (100 + 3)


def test_a_batch_that_never_formed_is_refused() -> None:
    early = record(0, 0.0, 0.01, (0.01, 0.02, 0.03))  # finished before the other got its first token
    late = record(1, 0.0, 0.05, (0.05,))
    with pytest.raises(CellFailed, match="streamed two or more tokens"):
        decode_sample([early, late], Cell("decode", 2, 64, 3))
    with pytest.raises(CellFailed, match="connection reset"):
        prefill_samples([record(0, 0, 0.01), RequestRecord(1, RequestStatus.FAILED, 0, 0, math.nan, math.nan, 8, 1, 0,
                                                           error="connection reset")], Cell("prefill", 2, 8))


def test_transfers_come_from_the_records_that_report_one() -> None:
    recs = [record(0, 0.0, 0.05, extra={"kv_transfer_s": 0.004, "kv_transfer_bytes": 1e6}),
            record(1, 0.0, 0.05, extra={}),
            record(2, 0.0, 0.05, status=RequestStatus.FAILED, extra={"kv_transfer_s": 0.1, "kv_transfer_bytes": 5.0})]
    got = transfer_samples(recs)
    assert len(got) == 1 and got[0]["bytes"] == 1e6 and got[0]["time_s"] == 0.004
    assert got[0]["ttft_ms"] == pytest.approx(50.0)


def test_repeats_of_a_cell_are_reduced_to_their_median() -> None:
    base = {"phase": "prefill", "route": "router", "span": "send", "cell_batch": 1.0, "batch_size": 1.0,
            "prompt_tokens": 64.0}
    samples = [{**base, "time_ms": t} for t in (10.0, 11.0, 90.0)] + [{**base, "prompt_tokens": 128.0, "time_ms": 5.0}]
    reduced = sorted(cell_medians(samples, "time_ms"), key=lambda s: s["prompt_tokens"])
    assert [s["time_ms"] for s in reduced] == [11.0, 5.0] and reduced[0]["repeats"] == 3.0
