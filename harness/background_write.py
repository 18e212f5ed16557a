"""Writing one result file in a thread while the job goes on.

Writing a simulated point's ``requests.parquet`` (on the Azure conversation hour: 19,366 rows and 4 million
token times) is mostly Arrow's encoding and the file's ``fsync``, both of which release the GIL. Started in
a thread as soon as the last point's records exist, it runs on the second core while the job summarises
that point and writes ``points.csv``. :class:`BackgroundWrite` runs the write (an atomic write from
:mod:`harness.atomic_files`, so a reader never sees a partial file) and :meth:`BackgroundWrite.wait` joins
it and raises its error, if any, in the caller's thread. The thread is not a daemon: a process that exits
while it runs waits for it, so no write is cut short.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Optional


class BackgroundWrite:
    """``write()`` (which writes ``path``) running in a thread of its own, started at construction."""

    def __init__(self, path: Path, write: Callable[[], object]) -> None:
        self.path = path
        self._write = write
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name=f"write {path.name}")
        self._thread.start()

    def _run(self) -> None:
        try:
            self._write()
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that waits (wait re-raises it)
            self._error = exc

    def wait(self) -> Path:
        """Block until the write has ended; the written path, or the write's own exception."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self.path
