"""Stopping a whole process group: SIGTERM, a grace period, then SIGKILL for what is left.

Used by :class:`systems.launch.processes.ManagedProcess` (its own children) and by
:mod:`systems.launch.leftovers` (groups a dead harness left running). Standard library only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Optional

from systems.launch.procfs import group_members

logger = logging.getLogger(__name__)

POLL_S = 0.05


def signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to process group ``pgid``; a group that is already gone is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def wait_group_gone(pgid: int, deadline: float, reap: Optional[Callable[[], object]] = None,
                    exclude: frozenset[int] = frozenset()) -> bool:
    """Poll until no live process (other than ``exclude``) is in group ``pgid``, or ``deadline``
    (``time.monotonic``) passes; ``reap`` is called each round (to reap a child that exited)."""
    while True:
        if reap is not None:
            reap()
        if not set(group_members(pgid)) - exclude:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)


def stop_group(pgid: int, grace_s: float, name: str, reap: Optional[Callable[[], object]] = None) -> bool:
    """SIGTERM group ``pgid``, wait up to ``grace_s``, SIGKILL what is left; True when the group is gone."""
    members = group_members(pgid)
    if not members:
        return True
    logger.info("%s: stopping process group %d (%d process(es))", name, pgid, len(members))
    signal_group(pgid, signal.SIGTERM)
    if wait_group_gone(pgid, time.monotonic() + grace_s, reap):
        return True
    logger.warning("%s: group %d still running %.0f s after SIGTERM; sending SIGKILL", name, pgid, grace_s)
    signal_group(pgid, signal.SIGKILL)
    if wait_group_gone(pgid, time.monotonic() + 10.0, reap):
        return True
    logger.error("%s: processes %s of group %d survived SIGKILL", name, group_members(pgid), pgid)
    return False
