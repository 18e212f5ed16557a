"""Loaded by every Python process of a vLLM server the suite starts (its folder is put first on the server's
``PYTHONPATH``; nothing else runs with it): caps how long vLLM's worker busy-polls for the next step.

vLLM's CPU executor hands every step from the engine core to a worker process through a shared-memory
queue whose reader spins on ``sched_yield()`` for ``busy_loop_s`` (1 s, a constructor default with no
setting) after each read before it sleeps on a socket. Under any steady load a worker therefore never
sleeps: it keeps its core busy between steps and competes with the router, the API servers and the load
generator on a 2-core host (``docs/vllm_cpu.md``, "Busy-polling workers", has the measurement).
``DISAGG_VLLM_BUSY_LOOP_S`` (seconds; set by :func:`systems.launch.vllm_server.server_env`) replaces that
default as soon as the module is imported, in the API server, the engine core and the forked worker alike.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

_TARGET = "vllm.distributed.device_communicators.shm_broadcast"
_ENV = "DISAGG_VLLM_BUSY_LOOP_S"


def _patch(module: object, seconds: float) -> None:
    cls = getattr(module, "SpinCondition", None)
    init = getattr(cls, "__init__", None)
    defaults = getattr(init, "__defaults__", None)
    names = getattr(getattr(init, "__code__", None), "co_varnames", ())
    if not defaults or "busy_loop_s" not in names:
        sys.stderr.write(f"disagg-bench: {_TARGET}.SpinCondition has no busy_loop_s default; {_ENV} not applied\n")
        return
    code = init.__code__
    first_default = code.co_argcount - len(defaults)
    index = list(code.co_varnames[:code.co_argcount]).index("busy_loop_s") - first_default
    patched = list(defaults)
    patched[index] = seconds
    init.__defaults__ = tuple(patched)


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def find_spec(self, name, path, target=None):  # noqa: ANN001, ANN201 - the finder protocol
        if name != _TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader, seconds = spec.loader, self.seconds

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec):  # noqa: ANN001, ANN201
                return loader.create_module(spec)

            def exec_module(self, module):  # noqa: ANN001, ANN201
                loader.exec_module(module)
                _patch(module, seconds)

        spec.loader = _Loader()
        return spec


def _install() -> None:
    value = os.environ.get(_ENV, "")
    if not value:
        return
    try:
        seconds = float(value)
    except ValueError:
        sys.stderr.write(f"disagg-bench: {_ENV}={value!r} is not a number of seconds; not applied\n")
        return
    sys.meta_path.insert(0, _PatchAfterImport(seconds))


_install()
