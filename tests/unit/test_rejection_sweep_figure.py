"""The rejection sweep's table and figure (``study.figure: rejection_sweep``) on a hand-made study: shares of
requests rejected in all and after their prefill per split, threshold and replay speed, beside the paper's."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from figures.claims.mooncake_rejection import PAPER_AFTER_PREFILL_SHARE, PAPER_REJECTED_SHARE
from figures.rejection_sweep import plot_rejection_sweep
from figures.sim_studies import PLOTS_BY_FIGURE
from figures.study_tables import rejection_sweep_table, rejection_table


def sweep_study() -> pd.DataFrame:
    """13P3D at thresholds 0.8 and 1.0 and 8P8D at 1.0, each at speed-ups 4 and 6 of 1,000 requests."""
    rows = []
    for (p, d), threshold in (((13, 3), 0.8), ((13, 3), 1.0), ((8, 8), 1.0)):
        for point, speedup in enumerate((6.0, 4.0)):
            after = 20 * speedup if (p, threshold) == (13, 0.8) else math.nan  # the counter is absent when 0
            rows.append({"variant": f"{p}P{d}D/{threshold}", "point": point, "speedup": speedup,
                         "arrival_time_scale": 1.0, "prefill": p, "decode": d, "decode_load_threshold": threshold,
                         "n_issued": 1000, "n_rejected": int(30 * speedup), "sim_n_rejected_after_prefill": after})
    return pd.DataFrame(rows)


def test_sweep_table_has_the_shares_sorted_by_split_threshold_and_speed():
    table = rejection_sweep_table(sweep_study())
    assert list(table["split"]) == ["8P8D"] * 2 + ["13P3D"] * 4
    assert list(table["decode_load_threshold"]) == [1.0, 1.0, 0.8, 0.8, 1.0, 1.0]
    assert list(table["speed"]) == [4.0, 6.0] * 3
    judged = table[(table["split"] == "13P3D") & (table["decode_load_threshold"] == 0.8)]
    assert judged["rejected_share"].tolist() == pytest.approx([0.12, 0.18])
    assert judged["after_prefill_share"].tolist() == pytest.approx([0.08, 0.12])
    assert (table.loc[table["decode_load_threshold"] == 1.0, "n_rejected_after_prefill"] == 0).all()
    with pytest.raises(KeyError, match="decode_load_threshold"):
        rejection_sweep_table(sweep_study().drop(columns="decode_load_threshold"))


def test_the_replay_speed_combines_the_load_point_and_the_variants_time_scale():
    study = sweep_study().assign(speedup=math.nan, arrival_time_scale=0.25)
    assert set(rejection_sweep_table(study)["speed"]) == {4.0}
    both = sweep_study().assign(arrival_time_scale=0.5)
    assert set(rejection_sweep_table(both)["speed"]) == {8.0, 12.0}
    plain = pd.DataFrame({"variant": ["8P8D/baseline"], "n_rejected": [1]})
    assert rejection_table(plain)["speed"].isna().all()  # neither column: no speed to tell


def test_sweep_figure_draws_both_shares_beside_the_papers(tmp_path: Path):
    job = tmp_path / "job"
    job.mkdir()
    sweep_study().to_csv(job / "study.csv", index=False)
    assert PLOTS_BY_FIGURE["rejection_sweep"] == (plot_rejection_sweep,)
    paths = plot_rejection_sweep(job)
    assert [p.name for p in paths] == ["rejection_sweep.png", "rejection_sweep.csv"] and paths[0].stat().st_size > 0
    plotted = pd.read_csv(paths[1])
    assert set(plotted["split"]) == {"13P3D", "8P8D"} and set(plotted["threshold"].astype(float)) == {0.8, 1.0}
    papers = plotted.groupby("measure")["paper"].first()
    assert papers["rejected (share of requests)"] == pytest.approx(PAPER_REJECTED_SHARE)
    assert papers["rejected after prefill (share)"] == pytest.approx(PAPER_AFTER_PREFILL_SHARE)
    assert len(plotted) == 2 * len(sweep_study())
