"""Margins for a figure of one row of panels, measured from its texts before it is drawn, so that it is
drawn once.

``fig.tight_layout()`` then ``savefig(bbox_inches="tight")`` lays a figure out from its drawn extents, then
draws it to find what to crop, then draws it again: three passes over every tick, for one picture (more
than half of a single run's figure time). :func:`fit_row` computes the same layout from the few texts that
reach past each panel's frame, which it measures with the figure's own renderer (the measurements are
cached, so the drawing reuses them):

- left of a panel, its y tick labels (their widths, plus the tick pad);
- below it, its x tick labels and x label;
- above it, its title, and its y axis' offset text (``1e6``) if any;
- at its sides, the half of its first and last x tick labels that hangs past the frame.

The figure's content is then placed ``edge`` inches from each side (as ``bbox_inches="tight"`` crops it:
0.1 in), with ``gap`` font sizes between neighbouring panels and between the suptitle and the panel titles
(as ``tight_layout``: 1.08). The tick labels are the axis' own locator and formatter at the panel's size;
since the ticks depend on that size, the layout is measured again until it settles (two or three rounds).

The panels' titles must be fixed at the top of their panel (``ax.set_title(text, y=1.0)``): matplotlib
otherwise moves a title above anything it would overlap, which costs a y-axis layout of its own per panel
at each draw. Tick parameters are taken from the rc settings (the suite's theme), not from ``tick_params``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import matplotlib
from matplotlib.text import Text

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis
    from matplotlib.backend_bases import RendererBase
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

EDGE_IN = 0.1  # savefig's pad_inches, which bbox_inches="tight" leaves around the content
GAP_FONT_SIZES = 1.08  # tight_layout's default pad between panels, in font sizes
MAX_ROUNDS = 4
SETTLED_PX = 0.5  # a layout within this of the last one's needs is kept
_DIRECTION_PAD = {"in": 0.0, "inout": 0.5, "out": 1.0}  # of the tick length (matplotlib.axis.Tick)


def _tick_pad_points(name: str) -> float:
    """The distance from a panel's frame to its tick labels (``name``: ``"x"`` or ``"y"``)."""
    rc = matplotlib.rcParams
    return rc[f"{name}tick.major.pad"] + rc[f"{name}tick.major.size"] * _DIRECTION_PAD[rc[f"{name}tick.direction"]]


class _Measure:
    """Text extents in pixels, as the figure's renderer draws them."""

    def __init__(self, fig: Figure) -> None:
        self.renderer: RendererBase = fig.canvas.get_renderer()
        self.px_per_pt = fig.dpi / 72
        self._text = Text(0, 0, "")  # one artist, re-used for each text measured
        self._text.set_figure(fig)
        self._sizes: dict[tuple[str, float | str], tuple[float, float]] = {}

    def size(self, text: str, fontsize: float | str) -> tuple[float, float]:
        key = (text, fontsize)
        if key not in self._sizes:
            self._text.set_text(text)
            self._text.set_fontsize(fontsize)
            box = self._text.get_window_extent(self.renderer)
            self._sizes[key] = (box.width, box.height)
        return self._sizes[key]


def _tick_labels(axis: Axis) -> list[tuple[float, str]]:
    """The major ticks an axis draws (inside its view, as ``Axis._update_ticks`` keeps them): (position
    along the axis from 0 to 1, label)."""
    locs = axis.get_majorticklocs()
    labels = axis.get_major_formatter().format_ticks(locs)
    scale = axis.get_transform()
    low, high = scale.transform(list(axis.get_view_interval()))
    tolerance = abs(high - low) * 1e-10
    ticks = []
    for loc, label in zip(locs, labels, strict=True):
        t = scale.transform([loc])[0]
        if min(low, high) - tolerance <= t <= max(low, high) + tolerance and label:
            ticks.append(((t - low) / (high - low) if high != low else 0.5, label))
    return ticks


class _Extents:
    """How far (pixels) a panel's texts reach past its frame on each side."""

    def __init__(self, ax: Axes, measure: _Measure) -> None:
        rc = matplotlib.rcParams
        box = ax.get_window_extent()
        self.left = self.right = self.below = self.above = 0.0
        y_ticks = _tick_labels(ax.yaxis)
        if y_ticks:
            sizes = [measure.size(label, rc["ytick.labelsize"]) for _, label in y_ticks]
            self.left = max(w for w, _ in sizes) + _tick_pad_points("y") * measure.px_per_pt
            self.above = self.below = max(h for _, h in sizes) / 2  # centred on the first and last tick
        x_ticks = _tick_labels(ax.xaxis)
        label_bottom = 0.0
        if x_ticks:
            pad = _tick_pad_points("x") * measure.px_per_pt
            for position, label in x_ticks:
                width, height = measure.size(label, rc["xtick.labelsize"])
                self.left = max(self.left, width / 2 - position * box.width)
                self.right = max(self.right, width / 2 - (1 - position) * box.width)
                label_bottom = max(label_bottom, pad + height)
        self.below = max(self.below, label_bottom)
        xlabel = ax.xaxis.label.get_text()
        if xlabel:
            self.below = max(self.below, label_bottom + rc["axes.labelpad"] * measure.px_per_pt
                             + measure.size(xlabel, ax.xaxis.label.get_fontsize())[1])
        # an axis' offset text (``1e6``) is drawn 3 points (Axis.OFFSETTEXTPAD) past its tick labels: the x
        # axis' below them, at its right end; the y axis' above the frame, at its left end
        x_offset = ax.xaxis.get_major_formatter().get_offset() if x_ticks else ""
        if x_offset:
            self.below = max(self.below, label_bottom + 3 * measure.px_per_pt
                             + measure.size(x_offset, rc["xtick.labelsize"])[1])
        y_offset = ax.yaxis.get_major_formatter().get_offset() if y_ticks else ""
        if y_offset:
            self.above = max(self.above, 3 * measure.px_per_pt + measure.size(y_offset, rc["ytick.labelsize"])[1])
        if ax.title.get_text():  # the centre title; a left or right one sits at the same height
            self.above = max(self.above, ax.title.get_window_extent(measure.renderer).y1 - box.y1)


def fit_row(fig: Figure, axes: Sequence[Axes], suptitle: str = "", *, edge: float = EDGE_IN,
            gap: float = GAP_FONT_SIZES) -> Text | None:
    """Lay out ``axes`` (one row of panels filling ``fig``, left to right) and ``suptitle`` (set here, at the
    top) so that every text fits ``edge`` inches inside the figure and ``gap`` font sizes apart; return the
    suptitle's artist (``None`` without one)."""
    measure = _Measure(fig)
    width, height = fig.bbox.width, fig.bbox.height
    edge_px = edge * fig.dpi
    gap_px = gap * matplotlib.rcParams["font.size"] * measure.px_per_pt
    top_extra = 0.0
    text = None
    if suptitle:
        text = fig.suptitle(suptitle, y=1 - edge_px / height, va="top")
        top_extra = text.get_window_extent(measure.renderer).height + gap_px
    n = len(axes)
    settled: tuple[float, ...] = ()
    for _ in range(MAX_ROUNDS):
        reach = [_Extents(ax, measure) for ax in axes]
        left = edge_px + reach[0].left
        right = edge_px + reach[-1].right
        between = max((reach[i].right + gap_px + reach[i + 1].left for i in range(n - 1)), default=0.0)
        bottom = edge_px + max(r.below for r in reach)
        top = edge_px + top_extra + max(r.above for r in reach)
        panel_width = (width - left - right - (n - 1) * between) / n
        if panel_width <= 0 or height - top - bottom <= 0:
            log.warning("the texts of this figure leave no room for its %d panel(s); kept the default layout", n)
            return text
        margins = (left, right, bottom, top, between)
        if settled and all(abs(a - b) < SETTLED_PX for a, b in zip(margins, settled, strict=True)):
            return text  # the ticks of this layout fit it
        settled = margins
        fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height,
                            top=1 - top / height, wspace=between / panel_width)
    return text
