"""What every reproduction claim is made of: the claim, its setup cell, our outcome and its verdict.

A :class:`Claim` names the paper's qualitative claim (with its citation), the paper's number as published,
the experiment preset that reproduces it, what of the paper's setup and ours is specific to this claim
(:class:`Setup`), the figures of the experiment's job that show it, and a function that computes *our* number
from that experiment's newest finished job folder and grades it (:class:`Outcome`). Nothing of ours is typed
in. The setup common to every claim of one experiment is written once, in its :class:`Experiment`.

Verdicts have four levels, decided by rules stated here and printed in the report's header:

* ``matches``: the direction is right and our magnitude lies within ``MAGNITUDE_BAND`` (relative) of the
  paper's number (of the nearest end of a range the paper reports);
* ``holds in direction``: the direction (or ordering) is right, the magnitude is not within the band, or
  the paper gives no magnitude we can compare;
* ``does not hold``: the direction is wrong. Such a row names, where one was run, the sensitivity run that
  shows which assumption would flip it;
* ``inconclusive``: our number is known only as a range (capacities bounded by the measured loads) and the
  range straddles the paper's direction (a ratio range containing 1): the run cannot tell.

Citation tags follow the research notes the numbers come from: [P] read in the paper's own text, figure labels
or tables (the primary PDF), [S] a secondary transcription that quotes the paper.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from figures.study_tables import JobFolder, MissingCapacity

MATCHES, DIRECTION, FAILS, INCONCLUSIVE = "matches", "holds in direction", "does not hold", "inconclusive"
VERDICTS = (MATCHES, DIRECTION, FAILS, INCONCLUSIVE)
MAGNITUDE_BAND = 0.25  # "matches": within +-25% of the paper's number
FAST25 = "Mooncake FAST'25"  # the papers the Mooncake claims cite
ARXIV_MC = "Mooncake arXiv 2407.00079"


class MissingData(Exception):
    """The job folder exists but lacks what the claim needs (an older or reduced preset)."""


@dataclass(frozen=True)
class Bounded:
    """A capacity as the study wrote it (``capacity.csv``): its value, how the measured loads bound it
    (``exact``, ``at_least``, ``below_range``), the lowest load measured, and its label."""

    value: float
    bound: str
    lowest: float
    label: str

    def __str__(self) -> str:
        return self.label


@dataclass(frozen=True)
class Outcome:
    """Our number (formatted), its verdict (one of ``VERDICTS``), why, and for a claim that does not hold
    the sensitivity finding (which assumption would flip it), when a sensitivity run exists."""

    value: str
    verdict: str
    reason: str
    sensitivity: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict: expected one of {VERDICTS}, got {self.verdict!r}")

    @property
    def holds(self) -> bool:
        return self.verdict in (MATCHES, DIRECTION)


@dataclass(frozen=True)
class Setup:
    """How the paper ran an experiment, how we run it, and each difference; empty parts are left out (a claim
    whose setup is all in its :class:`Experiment` has an empty one)."""

    paper: str = ""
    ours: str = ""
    differences: tuple[str, ...] = field(default_factory=tuple)

    @property
    def empty(self) -> bool:
        return not (self.paper or self.ours or self.differences)

    def __str__(self) -> str:
        diffs = "; ".join(self.differences) if self.differences else "none"
        return f"Paper: {self.paper}. Ours: {self.ours}. Differences: {diffs}."


@dataclass(frozen=True)
class Experiment:
    """An experiment preset (``experiment=<name>``) and the setup common to every claim read from its job."""

    name: str
    title: str
    setup: Setup


@dataclass(frozen=True)
class Claim:
    """One paper claim: who claims it, what, the published number, the setup specific to it (the rest is its
    experiment's), how we compute ours, the figures of its job that show it (PNG stems under the job's
    ``figures/``) and a short title for the report."""

    key: str
    paper: str
    claim: str
    paper_number: str
    experiment: str
    compute: Callable[[JobFolder], Outcome]
    setup: Setup = field(default_factory=Setup)
    figures: tuple[str, ...] = ()
    title: str = ""

    @property
    def heading(self) -> str:
        """The claim's short title (its key when it has none)."""
        return self.title or self.key

    @property
    def command(self) -> str:
        return f"python -m harness experiment={self.experiment}"


def direction_only(holds: bool) -> str:
    """The verdict of a claim whose paper number is an ordering or has no magnitude we can compare."""
    return DIRECTION if holds else FAILS


def direction_outcome(value: str, holds: bool, reason: str) -> Outcome:
    """An :class:`Outcome` graded on direction alone."""
    return Outcome(value, direction_only(holds), reason)


def grade_ratio(ours: float, paper_lo: float, paper_hi: float | None = None, band: float = MAGNITUDE_BAND) -> str:
    """The verdict of a ratio claim ("X is r times Y", r > 1 claimed): ``matches`` when ``ours`` is within
    ``band`` of the paper's ``[paper_lo, paper_hi]``, ``holds in direction`` when only ``ours > 1``."""
    paper_hi = paper_lo if paper_hi is None else paper_hi
    if not ours > 1:
        return FAILS
    if paper_lo * (1 - band) <= ours <= paper_hi * (1 + band):
        return MATCHES
    return DIRECTION


def grade_reduction(ours: float, paper: float, band: float = MAGNITUDE_BAND) -> str:
    """The verdict of a "lowers X by ``paper`` (a fraction)" claim: ``matches`` when our reduction is within
    ``band`` (relative) of the paper's, ``holds in direction`` when it is only positive, else ``does not hold``."""
    if not ours > 0:
        return FAILS
    if paper * (1 - band) <= ours <= paper * (1 + band):
        return MATCHES
    return DIRECTION


def grade_range(lo: float, hi: float, paper_lo: float, paper_hi: float | None = None,
                band: float = MAGNITUDE_BAND) -> str:
    """:func:`grade_ratio` for a ratio known only to lie in ``[lo, hi]`` (capacities bounded by the measured
    loads): ``matches`` only when the whole range is within the band, ``does not hold`` when it is all <= 1,
    ``inconclusive`` when it straddles 1."""
    paper_hi = paper_lo if paper_hi is None else paper_hi
    if hi <= 1:
        return FAILS
    if lo <= 1:
        return INCONCLUSIVE  # not shown to be > 1 nor <= 1: the measured loads leave it open
    if lo >= paper_lo * (1 - band) and hi <= paper_hi * (1 + band):
        return MATCHES
    return DIRECTION



def capacity_or_missing(read: Callable[[], pd.DataFrame]) -> pd.DataFrame:
    """A table read from the study's ``capacity.csv``; ``MissingData`` when the study wrote none."""
    try:
        return read()
    except MissingCapacity as exc:
        raise MissingData(str(exc)) from exc


def need_columns(table: pd.DataFrame, *columns: str) -> None:
    missing = [c for c in columns if c not in table]
    if missing:
        raise MissingData(f"study.csv has no column {', '.join(missing)}")


def _interval(c: Bounded) -> tuple[float, float]:
    """The range a capacity can lie in, given how the measured points bound it."""
    if c.bound == "at_least":
        return c.value, math.inf
    if c.bound == "below_range":
        return 0.0, c.lowest
    return c.value, c.value


def ratio_range(a: Bounded, b: Bounded) -> tuple[float, float]:
    """The range of a / b over the ranges the two capacities can lie in."""
    a_lo, a_hi = _interval(a)
    b_lo, b_hi = _interval(b)
    lo = a_lo / b_hi if b_hi > 0 else (math.inf if a_lo > 0 else 0.0)
    hi = a_hi / b_lo if b_lo > 0 else math.inf
    return lo, hi


def format_range(lo: float, hi: float, fmt: Callable[[float], str], floor: float = 0.0) -> str:
    """``x`` / ``>=x`` / ``<=x`` / ``x to y`` / ``n/a`` (nothing known) for a range whose smallest
    possible value is ``floor`` (0 for a ratio, -1 for a relative gain)."""
    if lo == hi:
        return fmt(lo)
    if lo <= floor and math.isinf(hi):
        return "n/a"
    if math.isinf(hi):
        return f">={fmt(lo)}"
    if lo <= floor:
        return f"<={fmt(hi)}"
    return f"{fmt(lo)} to {fmt(hi)}"


def greater_than_one(lo: float, hi: float) -> tuple[bool, str]:
    """Whether a ratio range shows 'greater than 1', and a note when the range leaves it open."""
    if lo > 1:
        return True, ""
    if hi <= 1:
        return False, ""
    return False, "inconclusive: the measured loads do not pin the ratio down (extend the study's load points)"


