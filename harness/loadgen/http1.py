"""Incremental HTTP/1.1 response parser: status line, headers, then a chunked, sized or read-to-close body.

``feed`` takes bytes as they arrive and returns the body pieces they completed; ``complete`` turns true at
the end of the response. It handles everything a streaming completion server sends (``1xx`` interim
responses are skipped, trailers are read and dropped) and raises ``HTTPProtocolError`` on anything else.
"""

from __future__ import annotations

MAX_HEAD_BYTES = 64 * 1024

_HEAD, _SIZE, _DATA, _DATA_END, _TRAILER, _LENGTH, _UNTIL_CLOSE, _DONE = range(8)


class HTTPProtocolError(ValueError):
    """The response is not valid HTTP/1.x."""


class ResponseParser:
    """Parses one response; ``reset()`` before the next one on a kept-alive connection."""

    __slots__ = ("_state", "_buf", "_remaining", "status", "reason", "headers", "keep_alive")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._state = _HEAD
        self._buf = b""
        self._remaining = 0
        self.status = 0
        self.reason = ""
        self.headers: dict[str, str] = {}
        self.keep_alive = True

    @property
    def head_complete(self) -> bool:
        return self._state != _HEAD

    @property
    def complete(self) -> bool:
        return self._state == _DONE

    @property
    def reads_until_close(self) -> bool:
        """The body has no length: it ends when the server closes the connection."""
        return self._state == _UNTIL_CLOSE

    def feed(self, data: bytes) -> list[bytes]:
        """Consume ``data``; return the body bytes it contained (de-chunked), in order."""
        if self._buf:
            data = self._buf + data
            self._buf = b""
        out: list[bytes] = []
        pos = 0
        n = len(data)
        while pos < n:
            state = self._state
            if state in (_DATA, _LENGTH):
                take = min(self._remaining, n - pos)
                out.append(data[pos : pos + take] if (pos or take != n) else data)
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    self._state = _DATA_END if state == _DATA else _DONE
            elif state == _SIZE:
                eol = data.find(b"\n", pos)
                if eol < 0:
                    self._keep(data, pos)
                    break
                field = data[pos:eol].split(b";", 1)[0].strip()
                try:
                    size = int(field, 16)
                except ValueError:
                    raise HTTPProtocolError(f"bad chunk size line {data[pos:eol][:40]!r}") from None
                if size < 0:
                    raise HTTPProtocolError(f"bad chunk size {size}")
                pos = eol + 1
                if not size:
                    self._state = _TRAILER
                elif data[pos + size : pos + size + 2] == b"\r\n":  # the whole chunk is here
                    out.append(data[pos : pos + size])
                    pos += size + 2
                else:
                    self._remaining = size
                    self._state = _DATA
            elif state in (_DATA_END, _TRAILER):
                eol = data.find(b"\n", pos)
                if eol < 0:
                    self._keep(data, pos)
                    break
                line = data[pos:eol].rstrip(b"\r")
                pos = eol + 1
                if state == _DATA_END:
                    if line:
                        raise HTTPProtocolError(f"chunk not followed by CRLF: {line[:40]!r}")
                    self._state = _SIZE
                elif not line:
                    self._state = _DONE
            elif state == _UNTIL_CLOSE:
                out.append(data[pos:] if pos else data)
                pos = n
            elif state == _HEAD:
                end = data.find(b"\r\n\r\n", pos)
                sep = 4
                if end < 0:
                    end = data.find(b"\n\n", pos)
                    sep = 2
                if end < 0:
                    self._keep(data, pos)
                    break
                self._parse_head(data[pos:end])
                pos = end + sep
            else:  # _DONE: bytes after the end of the response
                raise HTTPProtocolError(f"{n - pos} unexpected bytes after the response")
        return out

    def _keep(self, data: bytes, pos: int) -> None:
        rest = data[pos:]
        if len(rest) > MAX_HEAD_BYTES:
            raise HTTPProtocolError(f"header or chunk-size line longer than {MAX_HEAD_BYTES} bytes")
        self._buf = rest

    def _parse_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").splitlines()
        parts = lines[0].split(" ", 2) if lines else []
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise HTTPProtocolError(f"bad status line {lines[0][:60] if lines else ''!r}")
        try:
            status = int(parts[1])
        except ValueError:
            raise HTTPProtocolError(f"bad status line {lines[0][:60]!r}") from None
        if 100 <= status < 200:  # interim response (100 Continue): the real one follows
            return
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon:
                raise HTTPProtocolError(f"bad header line {line[:60]!r}")
            headers[name.strip().lower()] = value.strip()
        self.status = status
        self.reason = parts[2] if len(parts) > 2 else ""
        self.headers = headers
        connection = headers.get("connection", "").lower()
        self.keep_alive = "close" not in connection and (parts[0] != "HTTP/1.0" or "keep-alive" in connection)
        if status in (204, 304):
            self._state = _DONE
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._state = _SIZE
        elif "content-length" in headers:
            try:
                self._remaining = int(headers["content-length"])
            except ValueError:
                raise HTTPProtocolError(f"bad content-length {headers['content-length']!r}") from None
            self._state = _LENGTH if self._remaining > 0 else _DONE
        else:
            self._state = _UNTIL_CLOSE
            self.keep_alive = False
