"""Shared test fixtures: the directory holding the public traces (found like the suite finds them), and
Hydra composition of ``conf/`` exactly as the app does it.

Every Ray cluster the tests bring up listens on 127.0.0.1 only, and a Ray driver reaches one only with
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` in its environment *when it imports Ray* (Ray reads it once, at
import; without it the driver dials the host's network address instead and retries forever). Tests in one
process share that import, so it is set here, before any test imports Ray.

Tests that patch the simulator's classes (compiled classes keep their methods: a patch would change
nothing and the test would compare a run with itself) take the ``ran_on_sources`` fixture.

A test that starts a process or opens a network socket carries the ``integration`` marker: without it, the
test fails at the first ``subprocess``/``multiprocessing`` start or the first TCP/UDP ``bind``/``connect``
(:func:`_processes_and_sockets_need_the_integration_marker`), so the marker says what the test does.
A test that imports vLLM carries it too: vLLM's import runs ``file`` and ``uname -p`` (py-cpuinfo's
``platform.architecture()`` at import).

The README's test command (``make test``) runs the tests on two workers (pytest-xdist, ``-n 2 --dist
loadfile``): each file's tests run on one worker, in order, so a module's deployment is started once; two
files may run at once (two deployments sharing the two cores: no test relies on an idle machine).
``pytest`` alone runs everything in one process.
"""

from __future__ import annotations

import _posixsubprocess
import os
import socket
import subprocess
import sys

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from harness.config import compose_config, validate
from systems import compiled_core
from workloads.datadir import resolve_trace_path
from workloads.errors import TraceNotFoundError

NETWORK_FAMILIES = (socket.AF_INET, socket.AF_INET6)


@pytest.fixture(autouse=True)
def _processes_and_sockets_need_the_integration_marker(request: pytest.FixtureRequest,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail a test without the ``integration`` marker as soon as it starts a process or opens a network socket."""
    if request.node.get_closest_marker("integration") is not None:
        return

    def refuse(what: str) -> None:
        raise AssertionError(f"{request.node.nodeid} {what}: mark it pytest.mark.integration (tests/conftest.py)")

    def no_child(*args: Any, **kwargs: Any) -> Any:
        refuse("starts a process")

    def no_network(method: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(sock: socket.socket, *args: Any) -> Any:
            if sock.family in NETWORK_FAMILIES:
                refuse(f"opens a network socket ({method.__name__} {args[0] if args else ''})")
            return method(sock, *args)
        return guarded

    monkeypatch.setattr(subprocess.Popen, "_execute_child", no_child)  # subprocess, asyncio's subprocesses
    monkeypatch.setattr(_posixsubprocess, "fork_exec", no_child)  # multiprocessing's spawn, loky
    for name in ("fork", "posix_spawn", "posix_spawnp"):  # multiprocessing's fork, and the rest
        monkeypatch.setattr(os, name, no_child)
    for name in ("bind", "connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, no_network(getattr(socket.socket, name)))


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """Root of the trace directory; fails (never skips) when the traces cannot be found."""
    try:
        path = resolve_trace_path("mooncake_fast25/conversation_trace.jsonl")
    except TraceNotFoundError as exc:
        pytest.fail(f"the tests need the public traces: {exc}")
    return path.parent.parent


@pytest.fixture(scope="session")
def compose() -> Callable[..., Any]:
    """``compose(overrides)``: the validated ``Config`` of ``conf/config.yaml`` with ``overrides``, as
    ``python -m harness`` composes it; ``compose(overrides, validated=False)``: the raw ``DictConfig``."""

    def _compose(overrides: Sequence[str] = (), validated: bool = True) -> Any:
        raw = compose_config(list(overrides))
        return validate(raw) if validated else raw

    return _compose


class NoLoad:
    """A load driver for deployments that are built but never serve: any use fails the test."""

    def run(self, requests: Any, base_url: str, served_model: Any = None, api_key: Any = None) -> Any:
        raise AssertionError("not expected to send load")

    def warm_up(self, base_url: str, n: int, who: str) -> None:
        raise AssertionError("not expected to warm up")


@pytest.fixture(scope="session")
def no_load() -> NoLoad:
    """The load driver to build a deployment with when the test only inspects what it would launch."""
    return NoLoad()


_SOURCE_RUNS = pytest.StashKey[dict[str, subprocess.CompletedProcess]]()


@pytest.fixture
def ran_on_sources(request: pytest.FixtureRequest) -> bool:
    """False when this process runs the simulator from its Python sources (the test goes on). Under the
    compiled core (:mod:`systems.compiled_core`) the test function, every parametrization, runs once in a pytest
    subprocess with ``DISAGG_SIM_NATIVE=0`` and this fixture fails with its output unless it passed; True
    then (the test returns at once)."""
    if not compiled_core.status().active:
        return False
    node = request.node
    target = f"{node.path}::{node.originalname}"
    runs = request.config.stash.setdefault(_SOURCE_RUNS, {})
    if target not in runs:
        runs[target] = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--no-header", "-o", "addopts=", target],
            cwd=request.config.rootpath, env={**os.environ, compiled_core.ENV_SWITCH: "0"}, capture_output=True, text=True,
            timeout=1200, check=False)
    proc = runs[target]
    if proc.returncode != 0:
        pytest.fail(f"{target} on the Python sources (DISAGG_SIM_NATIVE=0) exited {proc.returncode}:\n"
                    f"{proc.stdout[-6000:]}{proc.stderr[-2000:]}")
    return True
