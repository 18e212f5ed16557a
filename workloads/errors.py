"""Exceptions raised while configuring, locating, parsing or generating a workload (all user errors)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from vocab.errors import UserError


class WorkloadError(UserError):
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


def not_utf8_error(path: str | Path) -> TraceFormatError:
    """The :class:`TraceFormatError` naming the first line of ``path`` that is not valid UTF-8 (raise it
    where reading the file as text failed with ``UnicodeDecodeError``)."""
    with Path(path).open("rb") as fh:
        for line_no, raw in enumerate(fh, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                return TraceFormatError(str(path), line_no, "encoding",
                                        f"byte 0x{raw[exc.start]:02x} at column {exc.start + 1} is not UTF-8 text; "
                                        "traces must be UTF-8")
    return TraceFormatError(str(path), 1, "encoding", "not UTF-8 text; traces must be UTF-8")
