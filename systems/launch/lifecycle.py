"""The context-manager life cycle every real-process deployment shares, and its health check.

A deployment registers what it starts on ``self._stack`` (an ``ExitStack``) inside ``_bring_up`` and
names each process it depends on with :meth:`ProcessDeployment.watch`. Entering runs ``_bring_up`` with
SIGTERM turned into an exception; if anything fails there, everything already started is stopped before
the error propagates. Leaving stops everything, in reverse order. :meth:`check_health` raises
``DeploymentError`` with the exit code and the last log lines of the first watched process that died,
and notes the shared-memory files the running ones use (:meth:`ManagedProcess.note_shm_files`).

Each process is started under the launch supervisor, so a harness killed even by SIGKILL takes its
servers along (see :mod:`systems.launch.processes`); leftovers are stopped at the next start.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack
from typing import TypeVar

from systems.contract import DeploymentError
from systems.launch.hosting.base import ServerProcess
from systems.launch.processes import sigterm_as_exception

Self = TypeVar("Self", bound="ProcessDeployment")


class ProcessDeployment:
    """Base of the deployments that start processes: subclasses implement ``_bring_up``."""

    _stack: ExitStack

    def _bring_up(self) -> None:
        raise NotImplementedError

    def watch(self, name: str, process: ServerProcess) -> ServerProcess:
        """Count ``process`` (shown as ``name``) among those :meth:`check_health` watches."""
        self._watched().append((name, process))
        return process

    def _watched(self) -> list[tuple[str, ServerProcess]]:
        if not hasattr(self, "_watched_processes"):
            self._watched_processes: list[tuple[str, ServerProcess]] = []
        return self._watched_processes

    def check_health(self) -> None:
        """``DeploymentError`` naming the first watched process that is no longer running.

        Running ones have the shared-memory files they use now noted (and recorded in their pid files),
        so files created after start-up are cleaned up too if the harness is killed later."""
        for name, process in self._watched():
            if not process.alive():
                lost = getattr(process, "lost", None)  # a server on a Ray node that is gone
                how = lost if lost else f"exit code {process.returncode}"
                raise DeploymentError(f"{name} died ({how}); last log lines:\n{process.tail_log()}")
            process.note_shm_files()

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
