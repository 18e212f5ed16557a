"""A single run's figure (figures/serving.py) is drawn without pandas or pyplot and laid out before it is drawn
once: its CSV is what pandas wrote (figures/csv_table.py) and every text fits (figures/row_layout.py)."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
from pathlib import Path

import matplotlib
import pandas as pd
import pytest

from figures.csv_table import read_csv_table
from figures.row_layout import fit_row
from figures.serving import PANELS
from figures.style import apply_theme, new_figure

ROOT = Path(__file__).resolve().parents[2]

POINTS = """point,rate_rps,offered_rate_rps,median_ttft_ms,p99_ttft_ms,median_tpot_ms,p99_tpot_ms,engine_prefix_hit_rate,\
predicted_prefix_hit_rate,cache_hit_fraction,slo_name,valid,validity_reasons
0,1.0,0.9936290229568946,92.13894324511784,431.04358665386826,30.79692763524995,34.59279732379198,,0.0,0.25,none,True,
1,2.0,1.9872580459137892,97.00405217654406,1e5,32.70802544904997,38.9237061050613,,0.5,,none,False,"requests were \
scheduled over 9744.583 s, shorter than the minimum 15000 s"
"""

# cells of every kind pandas tells apart: ints, ints with a gap (floats), floats in several spellings, booleans
# with and without a gap, text (quoted, with commas, quotes and missing-value markers), an all-empty column
CASES = {
    "kinds": "i,j,f,b,bn,t,e\n1,1,1.5,True,True,x,\n2,,1e5,False,,\"a, \"\"b\"\"\",\n-3,7,.5,TRUE,false,NA,\n",
    "numbers": "a,b,c,d\n1, 2 ,+inf,-0.0\n2,3,-Infinity,5.\n3,9223372036854775808,inF,1E-7\n",
    "mixed": "a,b,c\nTrue,1,1.0\n1,x,2\n,None,\n",
    "short rows": "a,b,c\n1,2\n\n3,4,5\n",
    "names": "a,a,,b\n1,2,3,4\n",
    "big ints": "a,b\n-1,18446744073709551615\n9223372036854775808,18446744073709551616\n",
    "header only": "a,b\n",
    "points": POINTS,
}


def _pandas_csv(path: Path, columns: list[str] | None = None) -> bytes:
    frame = pd.read_csv(path)
    out = io.StringIO()
    (frame if columns is None else frame[columns]).to_csv(out, index=False)
    return out.getvalue().encode()


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_table_is_written_back_as_pandas_writes_it(name, tmp_path):
    source, written = tmp_path / "in.csv", tmp_path / "out.csv"
    source.write_text(CASES[name], encoding="utf-8")
    read_csv_table(source).write_csv(written)
    assert written.read_bytes() == _pandas_csv(source)


def test_selected_columns_are_written_as_pandas_writes_them(tmp_path):
    source, written = tmp_path / "points.csv", tmp_path / "out.csv"
    source.write_text(POINTS, encoding="utf-8")
    keep = ["point", "rate_rps", "offered_rate_rps", "valid", "p99_ttft_ms", "engine_prefix_hit_rate"]
    read_csv_table(source).select(keep).write_csv(written)
    assert written.read_bytes() == _pandas_csv(source, keep)


def test_floats_round_trip_as_pandas_writes_them(tmp_path):
    rng = random.Random(14)
    values = [rng.uniform(-1, 1) * 10 ** rng.randint(-30, 30) for _ in range(2000)]
    values += [0.1, 1e-5, 1e-4, 1e15, 1e16, 1e22, 5e-324, 1.7976931348623157e308, 123456789.123456789]
    source, written = tmp_path / "in.csv", tmp_path / "out.csv"
    source.write_text("x\n" + "".join(f"{v!r}\n" for v in values), encoding="utf-8")
    table = read_csv_table(source)
    assert table["x"] == values
    table.write_csv(written)
    assert written.read_bytes() == _pandas_csv(source)


def test_a_table_reads_as_pandas_types_it(tmp_path):
    source = tmp_path / "in.csv"
    source.write_text(CASES["kinds"], encoding="utf-8")
    table, frame = read_csv_table(source), pd.read_csv(source)
    assert table.kinds == {"i": "int", "j": "float", "f": "float", "b": "bool", "bn": "bool", "t": "text",
                           "e": "float"}
    assert table["i"] == frame["i"].tolist() and table["b"] == frame["b"].tolist()
    assert [table.has_values(c) for c in table.columns] == [frame[c].notna().any() for c in frame.columns]
    # a missing `valid` cell counts as valid, as pandas' astype(bool) has it
    assert [bool(v) for v in table["bn"]] == frame["bn"].astype(bool).tolist() == [True, True, False]


def test_a_malformed_table_is_an_error_naming_the_file_and_line(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"empty\.csv: empty file; expected a header line"):
        read_csv_table(empty)
    long_row = tmp_path / "long.csv"
    long_row.write_text("a,b\n1,2\n1,2,3\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"long\.csv, line 3: 3 fields; the header names 2 columns"):
        read_csv_table(long_row)


# renders the figure of a job folder holding only points.csv, then reports what the process imported
CHILD = """
import json, sys
from figures.render import render_job
paths = render_job(sys.argv[1], "serve")
print(json.dumps({"paths": [str(p) for p in paths], "pandas": "pandas" in sys.modules,
                  "pyplot": "matplotlib.pyplot" in sys.modules}))
"""


def test_the_single_run_figure_imports_neither_pandas_nor_pyplot(tmp_path):
    (tmp_path / "points.csv").write_text(POINTS, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["pandas"] is False and report["pyplot"] is False
    png, csv = (Path(p) for p in report["paths"])
    assert png.name == "latency_vs_rate.png" and png.read_bytes().startswith(b"\x89PNG")
    # the plotted data: what the pandas version wrote (points[keep].to_csv(index=False)), to the byte
    hit_cols = ["predicted_prefix_hit_rate", "cache_hit_fraction"]  # engine_prefix_hit_rate is all empty
    keep = ["point", "rate_rps", "offered_rate_rps", "valid", *[c for _, cols in PANELS for c in cols], *hit_cols]
    points = pd.read_csv(tmp_path / "points.csv")
    assert csv.read_bytes() == _pandas_csv(tmp_path / "points.csv", [c for c in keep if c in points.columns])


def test_style_still_offers_pyplot_on_demand():
    from figures.style import plt

    assert plt is sys.modules["matplotlib.pyplot"]


@pytest.mark.parametrize("scale", [1e-5, 1.0, 9.9e5, 4e7])
def test_the_row_layout_keeps_every_text_inside_the_figure_and_apart(scale):
    """Panels whose tick labels are wide (up to 999999), have an offset text (1e7, 1e-5), and x ticks in the
    thousands: after fit_row and one draw, each panel's texts lie inside the figure, clear of its neighbours'
    and below the suptitle, and the content reaches to the edge margin (the layout is tight, not just loose)."""
    apply_theme()
    fig, axes = new_figure(1, 4, figsize=(13.2, 3.0))
    rates = [1000.0, 2500.0, 7990.0]
    for i, ax in enumerate(axes[0]):
        ax.plot(rates, [scale * (i + 1) * r / 8000 for r in rates], marker="o", label="a long legend entry")
        ax.set_title(f"panel {i} title", y=1.0)
        ax.set_xlabel("offered rate (req/s)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=6)
    title = fit_row(fig, list(axes[0]), "A suptitle")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    width, height = fig.bbox.width, fig.bbox.height
    boxes = [ax.get_tightbbox(renderer) for ax in axes[0]]
    suptitle = title.get_window_extent(renderer)
    edge = 0.1 * fig.dpi
    for box in [*boxes, suptitle]:
        assert box.x0 >= edge - 1 and box.x1 <= width - edge + 1
        assert box.y0 >= edge - 1 and box.y1 <= height - edge + 1
    gap = 1.08 * matplotlib.rcParams["font.size"] * fig.dpi / 72  # tight_layout's pad
    gaps = [right.x0 - left.x1 for left, right in zip(boxes, boxes[1:], strict=False)]
    assert min(gaps) == pytest.approx(gap, abs=2)  # the closest neighbours are the pad apart, none closer
    assert suptitle.y0 - max(box.y1 for box in boxes) == pytest.approx(gap, abs=2)
    assert boxes[0].x0 == pytest.approx(edge, abs=2)  # as tight as bbox_inches="tight" would crop it
    assert boxes[-1].x1 == pytest.approx(width - edge, abs=2)
    assert min(box.y0 for box in boxes) == pytest.approx(edge, abs=2)
    assert suptitle.y1 == pytest.approx(height - edge, abs=2)
