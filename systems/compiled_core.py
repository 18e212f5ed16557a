"""The simulator's compiled core: which modules mypyc compiles, where the build lives, and whether it can stand
in for the sources.

The set-up (``.ci/bootstrap.sh``, run by ``make``) builds :data:`COMPILED_MODULES` with mypyc
(:mod:`systems.compiled_core_build`) into ``<virtualenv>/compiled-core/<cache tag>/``, laid out as the packages
are (``systems/sim/events.<abi>.so`` ...), with a manifest of the sha256 of every source it was compiled from.
The packages that hold compiled modules (:data:`PACKAGES`) put that folder in front of their ``__path__``
(:func:`package_path`, called in their ``__init__``) when every source still matches the manifest, so Python
imports the compiled modules the ordinary way, extension modules first. Otherwise the sources are imported,
after one warning that says why; all or none, since an interpreted class cannot subclass a compiled one.
``DISAGG_SIM_NATIVE=0`` imports the sources without a warning.

The compiled modules are the sources, compiled: the same operations on the same doubles, so the same decisions
and byte-identical records (``tests/unit/test_compiled_core.py``). What differs: a compiled class's methods cannot
be replaced at run time (a test that patches one takes ``tests/conftest.py``'s ``ran_on_sources``), and a value
of the wrong type for an annotated attribute or argument raises ``TypeError`` where the sources would carry on.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

# the hot path of a simulation. Not the performance models' classes (they are pickled to worker processes,
# subclassed by interpreted models and introspected by the registry, which compiled classes do not allow): the
# roofline model's decode loop is a function of its own (roofline_steps)
COMPILED_MODULES = ("systems.sim.events", "systems.sim.keys", "systems.sim.request", "systems.sim.record_columns",
                    "systems.sim.instance", "systems.sim.simulation", "systems.sim.load_index",
                    "systems.sim.perf.roofline_steps", "systems.policies.block_lru", "systems.policies.outstanding")
PACKAGES = tuple(sorted({m.rpartition(".")[0] for m in COMPILED_MODULES}))  # each calls package_path
FALLBACK_WARNING = "the simulator runs from its Python sources, slower, with the same results"
GROUP = "systems.sim._compiled_core"  # mypyc's shared library of the group: systems/sim/_compiled_core__mypyc
ENV_SWITCH = "DISAGG_SIM_NATIVE"  # "0": always import the sources
MANIFEST = "manifest.json"
PROJECT_ROOT = Path(__file__).resolve().parents[1]

log = logging.getLogger(__name__)


def build_dir(prefix: Optional[str] = None) -> Path:
    """Where this interpreter's build lives: ``<prefix>/compiled-core/<cache tag>`` (prefix: ``sys.prefix``)."""
    return Path(sys.prefix if prefix is None else prefix) / "compiled-core" / sys.implementation.cache_tag


def source_path(module: str, root: Path = PROJECT_ROOT) -> Path:
    """The source file of ``module`` (a dotted name under the project root)."""
    return root.joinpath(*module.split(".")).with_suffix(".py")


def source_hashes(modules: Sequence[str] = COMPILED_MODULES, root: Path = PROJECT_ROOT) -> dict[str, str]:
    """sha256 of each module's source, by module name."""
    return {m: hashlib.sha256(source_path(m, root).read_bytes()).hexdigest() for m in modules}


def check_build(directory: Path, hashes: Mapping[str, str]) -> Optional[str]:
    """Why the build in ``directory`` cannot stand in for sources with ``hashes``; None when it can."""
    manifest = directory / MANIFEST
    if not manifest.is_file():
        return f"no build in {directory} (make builds it: python -m systems.compiled_core_build)"
    try:
        built = json.loads(manifest.read_text(encoding="utf-8")).get("sources", {})
    except (OSError, ValueError, AttributeError) as exc:
        return f"{manifest} is unreadable ({exc}); rebuild with python -m systems.compiled_core_build"
    changed = sorted(m for m, h in hashes.items() if built.get(m) != h)
    if changed:
        return (f"the build in {directory} was compiled from other sources ({', '.join(changed)} changed since); "
                "rebuild with make or python -m systems.compiled_core_build")
    return None


@dataclass(frozen=True)
class CoreStatus:
    """Whether the compiled core stands in for the sources, and if not, why."""

    active: bool
    reason: str
    directory: Path


def plan(environ: Optional[Mapping[str, str]] = None, directory: Optional[Path] = None) -> CoreStatus:
    """Whether the compiled core can stand in for the sources in this environment (nothing is imported)."""
    env = os.environ if environ is None else environ
    where = build_dir() if directory is None else directory
    if env.get(ENV_SWITCH, "1") == "0":
        return CoreStatus(False, f"{ENV_SWITCH}=0", where)
    why = check_build(where, source_hashes())
    return CoreStatus(why is None, why or "compiled", where)


@functools.cache
def status() -> CoreStatus:
    """This process's decision, made once (the first package of :data:`PACKAGES` imported asks for it); a build
    that cannot be used is reported by one warning (one log line; on stderr before logging is set up)."""
    found = plan()
    if not found.active and not found.reason.startswith(ENV_SWITCH):
        log.warning("%s: %s", FALLBACK_WARNING, found.reason)
    return found


def package_path(package: str, path: Sequence[str]) -> list[str]:
    """The ``__path__`` of ``package`` (one of :data:`PACKAGES`): its folder in the build first when
    :func:`status` says the build is in use, else ``path`` as it is."""
    if not status().active:
        return list(path)
    return [str(status().directory.joinpath(*package.split("."))), *path]
