"""Binding every thread of a server to its cores (CPU hosts).

``VLLM_CPU_OMP_THREADS_BIND`` binds only vLLM's OpenMP compute threads. The server's other threads (the API
server, the engine core's busy-polling loop, tokenizers, the KV connector's threads) float over every core,
where they compete with the other instances, the router and the load generator. :func:`pin_threads` binds
all of them, so an instance's own busy-polling only takes from its own core
(``docs/vllm_cpu.md``, "Who takes the CPU"); :meth:`systems.launch.vllm_server.VllmServer.pin_to_cores`
applies it to every CPU server once it is ready.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path

from systems.launch.procfs import thread_ids

log = logging.getLogger(__name__)


def parse_cpu_list(text: str) -> set[int]:
    """``"0"``, ``"0-3"``, ``"0,2-3"`` as a set of CPU numbers (``ValueError`` on anything else)."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise ValueError(f"empty item in CPU list {text!r}")
        low, _, high = part.partition("-")
        first, last = int(low), int(high) if high else int(low)
        if first < 0 or last < first:
            raise ValueError(f"bad range {part!r} in CPU list {text!r}")
        cpus.update(range(first, last + 1))
    return cpus


def pin_threads(pids: Iterable[int], cpus: set[int], proc: Path = Path("/proc")) -> int:
    """Bind every thread of every process in ``pids`` to ``cpus``; returns how many threads were bound
    (threads that exit meanwhile are skipped). Threads and processes started later inherit the binding."""
    pinned = 0
    for pid, tid in thread_ids(pids, proc):
        try:
            os.sched_setaffinity(tid, cpus)
            pinned += 1
        except OSError as exc:  # gone, or not ours
            log.debug("cannot bind thread %d of %d to %s: %s", tid, pid, sorted(cpus), exc)
    return pinned
