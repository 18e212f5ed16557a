"""The simulator's compiled core: which modules (the simulator's hot path, the block LRU of its prefix caches
and the least-outstanding index) are compiled with mypyc, where the build lives, and the import hook that
loads the build instead of the sources.

:mod:`systems.sim.native_build` compiles :data:`NATIVE_MODULES` into ``<sys.prefix>/sim-native/<cache tag>/``
(inside the virtualenv, for its interpreter) with a manifest holding the sha256 of every source it was
compiled from. Importing ``systems`` calls :func:`install`, which puts a :class:`NativeFinder` in front of
``sys.meta_path`` only when every source still matches the manifest byte for byte. A changed source, a
missing or partial build, or ``DISAGG_SIM_NATIVE=0`` in the environment, and every module is imported from
its source: all or none, since an interpreted class cannot subclass a compiled one.

The compiled modules are the sources, compiled: the same operations on the same doubles, so the same
decisions and byte-identical records (``tests/unit/test_sim_native.py`` compares them for the four designs).
What differs: a compiled class's methods cannot be replaced at run time (a test that patches one needs
the sources: ``tests/conftest.py``'s ``pure_sim`` fixture), and a value of the wrong type for an annotated
attribute or argument raises ``TypeError`` where the sources would carry on.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import json
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Optional

log = logging.getLogger(__name__)

# the hot path of a simulation. Not the performance models' classes (they are pickled to worker processes,
# subclassed by interpreted models and introspected by the registry, which compiled classes do not allow): the
# roofline model's decode loop is a function of its own (roofline_steps)
NATIVE_MODULES = ("systems.sim.events", "systems.sim.keys", "systems.sim.request", "systems.sim.record_columns",
                  "systems.sim.instance", "systems.sim.cluster", "systems.sim.load_index",
                  "systems.sim.perf.roofline_steps", "systems.policies.block_lru", "systems.policies.outstanding")
# C extensions built with them, from a C source of the same name (systems/sim/_arenas.c: see systems.sim.arenas;
# systems/sim/_timeline.c: see systems.sim.timeline_writes; systems/sim/_event_heap.c: see systems.sim.events)
C_MODULES = ("systems.sim._arenas", "systems.sim._timeline", "systems.sim._event_heap")
GROUP = "systems_sim_native"  # mypyc's shared library of the group: the module <GROUP>__mypyc
ENV_SWITCH = "DISAGG_SIM_NATIVE"  # "0": always import the sources
MANIFEST = "manifest.json"
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def build_dir(prefix: Optional[str] = None) -> Path:
    """Where this interpreter's build lives: ``<prefix>/sim-native/<cache tag>`` (prefix: ``sys.prefix``)."""
    return Path(sys.prefix if prefix is None else prefix) / "sim-native" / sys.implementation.cache_tag


def source_path(module: str, root: Path = PROJECT_ROOT) -> Path:
    """The source file of ``module`` (a dotted name under the project root): ``.c`` for :data:`C_MODULES`."""
    return root.joinpath(*module.split(".")).with_suffix(".c" if module in C_MODULES else ".py")


def source_hashes(modules: Sequence[str] = NATIVE_MODULES + C_MODULES, root: Path = PROJECT_ROOT) -> dict[str, str]:
    """sha256 of each module's source, by module name."""
    return {m: hashlib.sha256(source_path(m, root).read_bytes()).hexdigest() for m in modules}


@dataclass(frozen=True)
class NativeStatus:
    """Whether the compiled core is in use, and if not, why."""

    active: bool
    reason: str
    directory: Path


class NativeFinder(importlib.abc.MetaPathFinder):
    """Finds the compiled :data:`NATIVE_MODULES`, :data:`C_MODULES` and mypyc's group library in one build
    directory."""

    def __init__(self, directory: Path, modules: Sequence[str] = NATIVE_MODULES + C_MODULES) -> None:
        self.directory = directory
        self.modules = frozenset(modules)

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: Optional[ModuleType] = None) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname == f"{GROUP}__mypyc":
            folder = self.directory
        elif fullname in self.modules:
            folder = self.directory.joinpath(*fullname.split(".")[:-1])
        else:
            return None
        loader = (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES)
        return importlib.machinery.FileFinder(str(folder), loader).find_spec(fullname, target)


def check_build(directory: Path, hashes: dict[str, str]) -> Optional[str]:
    """Why the build in ``directory`` cannot stand in for sources with ``hashes``; None when it can."""
    manifest = directory / MANIFEST
    if not manifest.is_file():
        return f"no build in {directory} (make builds it: python -m systems.sim.native_build)"
    try:
        built = json.loads(manifest.read_text(encoding="utf-8")).get("sources", {})
    except (OSError, ValueError, AttributeError) as exc:
        return f"{manifest} is unreadable ({exc}); rebuild with python -m systems.sim.native_build"
    changed = sorted(m for m, h in hashes.items() if built.get(m) != h)
    if changed:
        return (f"the build in {directory} was compiled from other sources ({', '.join(changed)} changed since); "
                "rebuild with python -m systems.sim.native_build")
    return None


def plan(environ: Optional[dict[str, str]] = None, directory: Optional[Path] = None) -> NativeStatus:
    """Whether the compiled core can stand in for the sources in this environment (nothing is imported or
    installed)."""
    env = os.environ if environ is None else environ
    where = build_dir() if directory is None else directory
    if env.get(ENV_SWITCH, "1") == "0":
        return NativeStatus(False, f"{ENV_SWITCH}=0", where)
    why = check_build(where, source_hashes())
    return NativeStatus(why is None, why or "compiled", where)


def _installed() -> Optional[NativeFinder]:
    return next((f for f in sys.meta_path if isinstance(f, NativeFinder)), None)


def install() -> NativeStatus:
    """Put a :class:`NativeFinder` in front of ``sys.meta_path`` when :func:`plan` allows and no module it
    compiles is imported yet (once per process; ``systems/__init__.py`` calls it first thing)."""
    if _installed() is not None:
        return status()
    found = plan()
    if found.active and any(m in sys.modules for m in NATIVE_MODULES):
        found = NativeStatus(False, "simulator modules were imported from their sources already", found.directory)
    if found.active:
        sys.meta_path.insert(0, NativeFinder(found.directory))
    else:
        log.debug("simulator core: Python sources (%s)", found.reason)
    return found


def status() -> NativeStatus:
    """Whether this process imports the compiled core (``active``), and if not, why."""
    finder = _installed()
    if finder is not None:
        return NativeStatus(True, "compiled", finder.directory)
    found = plan()
    if found.active:  # a good build, but the sources were imported first
        return NativeStatus(False, "simulator modules were imported from their sources already", found.directory)
    return found
