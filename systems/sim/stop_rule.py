"""What a simulation may be stopped by before its events run out: a rule that a study passes in when the outcome
it wants from the run (for example "this load misses its SLO") can be decided from part of it.

The simulator calls the rule every ``interval_s`` simulated seconds, after every event up to that instant has
run, with the instant and the run's requests (in request order); a non-empty string it returns stops the run
there and becomes the run's ``stopped_early`` (in ``SimRun.info``, with ``stopped_at_s``); the requests still
in flight end as ``unfinished`` with that reason as their error. A rule must only stop a run whose outcome
cannot change any more: the records of a stopped run are partial by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, Protocol

from systems.sim.request import SimRequest


class StopRule(Protocol):
    """Decides, at ``now``, whether the rest of a run can be skipped (see the module docstring)."""

    interval_s: float

    def __call__(self, now: float, requests: Sequence[SimRequest]) -> Optional[str]: ...
