"""Incremental parser for server-sent events (``text/event-stream``), the framing of streamed completions.

Bytes may arrive split at any point: inside a line, between ``\\r`` and ``\\n``, or with several events in
one piece. Lines end with ``\\n``, ``\\r\\n`` or ``\\r``; a line starting with ``:`` is a comment (keep-alive
``: ping``); a blank line ends an event. Only the ``data`` and ``event`` fields matter here.
"""

from __future__ import annotations

from typing import NamedTuple

MAX_LINE_BYTES = 16 * 1024 * 1024


class SSEError(ValueError):
    """The stream is not a valid event stream (a line longer than ``MAX_LINE_BYTES``)."""


class SSEEvent(NamedTuple):
    """One dispatched event: its type (``message`` unless an ``event:`` field said otherwise) and data."""

    event: str
    data: bytes


class SSEParser:
    """Feed it bytes as they arrive; it returns the events each piece completes."""

    __slots__ = ("_partial", "_skip_lf", "_data", "_event", "n_comments")

    def __init__(self) -> None:
        self._partial = b""  # an unterminated line carried over to the next piece
        self._skip_lf = False  # the last piece ended with "\r": drop a "\n" that starts the next
        self._data: list[bytes] = []
        self._event = ""
        self.n_comments = 0

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume ``chunk`` and return the events it completed, in order."""
        if not chunk:
            return []
        if not (self._partial or self._data or self._skip_lf or self._event) and chunk[-2:] == b"\n\n":
            fast = self._fast_path(chunk)
            if fast is not None:
                return fast
        if self._skip_lf:
            self._skip_lf = False
            if chunk[0] == 10:  # "\n"
                chunk = chunk[1:]
                if not chunk:
                    return []
        if self._partial:
            chunk = self._partial + chunk
            self._partial = b""
        lines = chunk.splitlines(True)
        last = lines[-1]
        end = last[-1]
        if end == 13:  # "\r": may be the first half of "\r\n"
            self._skip_lf = True
        elif end != 10:
            self._partial = lines.pop()
            if len(self._partial) > MAX_LINE_BYTES:
                raise SSEError(f"event-stream line longer than {MAX_LINE_BYTES} bytes")
        events: list[SSEEvent] = []
        for raw in lines:
            self._line(raw.rstrip(b"\r\n"), events)
        return events

    @staticmethod
    def _fast_path(chunk: bytes) -> list[SSEEvent] | None:
        """The common case: whole ``data: ...`` events, ``\n\n``-separated, one data line each."""
        if b"\r" in chunk:
            return None
        parts = chunk.split(b"\n\n")
        parts.pop()  # the empty tail after the final separator
        events = []
        for part in parts:
            if part[:6] != b"data: " or b"\n" in part:
                return None
            events.append(SSEEvent("message", part[6:]))
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: finish a pending line and dispatch a pending event (lenient: the spec drops it)."""
        events: list[SSEEvent] = []
        if self._partial:
            self._line(self._partial, events)
            self._partial = b""
        self._line(b"", events)
        return events

    def _line(self, line: bytes, events: list[SSEEvent]) -> None:
        if not line:
            if self._data:
                data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
                events.append(SSEEvent(self._event or "message", data))
                self._data = []
            self._event = ""
            return
        if line[0] == 58:  # ":" comment / keep-alive
            self.n_comments += 1
            return
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
