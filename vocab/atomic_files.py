"""Atomic, durable file writes shared by the results folder (:mod:`harness.results`) and the figures.

A file is written under a temporary name in its own folder, fsynced, moved into place with ``os.replace``,
and the folder is fsynced so the new name is durable: a reader, a crash or a killed redraw never sees a
half-written file. Imports nothing of the suite, so every package may use it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def fsync_path(path: Path) -> None:
    """Flush a file's (or a folder's: its entries') data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, write: Callable[[Path], None]) -> Path:
    """Write ``path`` through ``write(tmp)``; the temporary name keeps the suffix (a plotting library picks
    the format from it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        fsync_path(tmp)
        os.replace(tmp, path)
        fsync_path(path.parent)
    finally:
        tmp.unlink(missing_ok=True)
    return path
