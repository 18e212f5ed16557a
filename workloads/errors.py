"""Exceptions raised while configuring, locating, parsing or generating a workload."""

from __future__ import annotations

from typing import Optional


class WorkloadError(Exception):
    """A workload cannot be built (base class of every error in this package)."""


class WorkloadConfigError(WorkloadError, ValueError):
    """A workload configuration value is invalid; the message starts with the key, e.g. ``workload.turns``."""


class TraceNotFoundError(WorkloadError, FileNotFoundError):
    """A trace file is not in any searched data directory; the message lists them and the upstream source."""

    def __init__(self, message: str, file: str = "", searched: Optional[list[str]] = None) -> None:
        super().__init__(message)
        self.file = file
        self.searched = list(searched or [])

    def __str__(self) -> str:  # FileNotFoundError would otherwise format (errno, strerror)
        return str(self.args[0]) if self.args else ""

    def __reduce__(self):  # keep it picklable (e.g. across multiprocessing)
        return (type(self), (str(self), self.file, self.searched))


class TraceFormatError(WorkloadError, ValueError):
    """A trace row (or header) is malformed. Message: ``<path>:<line>: <field>: <problem>``."""

    def __init__(self, path: str, line: int, field: str, problem: str) -> None:
        super().__init__(f"{path}:{line}: {field}: {problem}")
        self.path = path
        self.line = line
        self.field = field
        self.problem = problem

    def __reduce__(self):  # keep it picklable (e.g. across multiprocessing)
        return (type(self), (self.path, self.line, self.field, self.problem))
