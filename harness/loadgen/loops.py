"""Event-loop choice: uvloop when it is installed (faster callbacks and socket I/O), else asyncio's own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Optional


def loop_factory(prefer_uvloop: bool = True) -> Optional[Callable[[], asyncio.AbstractEventLoop]]:
    """A factory for ``asyncio.Runner``: ``uvloop.new_event_loop`` when available, else None (default)."""
    if prefer_uvloop:
        try:
            import uvloop
        except ImportError:
            return None
        return uvloop.new_event_loop
    return None
