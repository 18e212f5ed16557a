"""The context-manager life cycle every real-process deployment shares.

A deployment registers what it starts on ``self._stack`` (an ``ExitStack``) inside ``_bring_up``. Entering
runs ``_bring_up`` with SIGTERM turned into an exception; if anything fails there, everything already
started is stopped before the error propagates. Leaving stops everything, in reverse order.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack
from typing import TypeVar

from systems.launch.processes import sigterm_as_exception

Self = TypeVar("Self", bound="ProcessDeployment")


class ProcessDeployment:
    """Base of the deployments that start processes: subclasses implement ``_bring_up``."""

    _stack: ExitStack

    def _bring_up(self) -> None:
        raise NotImplementedError

    def __enter__(self: Self) -> Self:
        self._stack = getattr(self, "_stack", None) or ExitStack()
        self._stack.__enter__()
        try:
            self._stack.enter_context(sigterm_as_exception())
            self._bring_up()
        except BaseException:
            self._stack.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, *exc: object) -> bool:
        self._stack.__exit__(*exc)  # type: ignore[arg-type]
        return False
