"""DistServe's "tighter SLO" measure: attainment at scaled SLOs and the interpolated 90% crossing."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from harness.slo import SLOConfig
from harness.studies.slo_scale import crossing, crossing_table, scale_rows
from vocab.records import RequestRecord, RequestStatus

SCALES = [1.6, 1.4, 1.2, 1.0, 0.8, 0.6, 0.4]


def test_crossing_interpolates_between_the_scales_around_the_target():
    c = crossing(SCALES, [1.0, 1.0, 0.95, 0.85, 0.5, 0.2, 0.0], 0.9)
    assert c.bound == "exact" and c.scale == pytest.approx(1.1)  # 1.2 + (0.9 - 0.95) * (1.0 - 1.2) / (0.85 - 0.95)
    assert c.interval == (c.scale, c.scale)
    unsorted = crossing(list(reversed(SCALES)), [0.0, 0.2, 0.5, 0.85, 0.95, 1.0, 1.0], 0.9)
    assert unsorted.scale == pytest.approx(1.1)


def test_crossing_takes_the_first_from_the_loose_end_as_the_artifact_does():
    # non-monotone curve: DistServe's find_intersection returns the first crossing scanning from large scales
    c = crossing([1.6, 1.2, 0.8, 0.4], [0.95, 0.85, 0.95, 0.5], 0.9)
    assert c.scale == pytest.approx(1.4)


def test_crossing_outside_the_scales_is_a_bound():
    above = crossing(SCALES, [0.8] * 7, 0.9)
    assert above.bound == "above_range" and above.scale == 1.6 and above.interval == (1.6, math.inf)
    assert str(above) == ">1.6"
    below = crossing(SCALES, [0.99] * 7, 0.9)
    assert below.bound == "at_most" and below.scale == 0.4 and below.interval == (0.0, 0.4)
    with pytest.raises(ValueError):
        crossing([], [], 0.9)


def _record(i: int, ttft_s: float, tpot_s: float, n_out: int = 11, ok: bool = True) -> RequestRecord:
    first = ttft_s
    tokens = tuple(first + k * tpot_s for k in range(n_out))
    return RequestRecord(request_id=i, status=RequestStatus.OK if ok else RequestStatus.FAILED, arrival_s=0.0,
                         sent_s=0.0, first_token_s=first, finish_s=tokens[-1], input_length=10, output_length=n_out,
                         n_out=n_out if ok else 0, chunk_times_s=tokens if ok else ())


def test_scale_rows_count_joint_and_single_bounds():
    records = [_record(0, 0.1, 0.05), _record(1, 0.3, 0.05), _record(2, 0.1, 0.15), _record(3, 0.1, 0.05, ok=False)]
    rows = pd.DataFrame(scale_rows(records, SLOConfig(ttft_ms=250, tpot_ms=100), [1.0, 2.0, 0.3]))
    at = rows.set_index("slo_scale")
    assert at.loc[1.0, ["attainment", "attainment_ttft", "attainment_tpot"]].tolist() == [0.25, 0.5, 0.5]
    assert at.loc[2.0, "attainment"] == 0.75  # the failed request never meets it
    assert at.loc[0.3, "attainment"] == 0.0 and at.loc[2.0, "ttft_bound_ms"] == 500


def test_crossing_table_per_variant_and_point():
    rows = [{"variant": v, "point": 0, "per_gpu_rate": 1.5, "target": 0.9, "slo_scale": s, "attainment": a,
             "attainment_ttft": 1.0, "attainment_tpot": a}
            for v, atts in (("a/DistServe", [1.0, 0.95, 0.85]), ("a/vLLM", [0.8, 0.7, 0.6]))
            for s, a in zip([1.2, 1.0, 0.8], atts, strict=True)]
    table = crossing_table(pd.DataFrame(rows)).set_index("variant")
    assert table.loc["a/DistServe", "crossing_scale"] == pytest.approx(0.9)
    assert table.loc["a/vLLM", "bound"] == "above_range" and table.loc["a/vLLM", "ttft_bound"] == "at_most"
