"""The programs a local cluster needs, found on ``PATH`` plus ``/usr/sbin`` and ``/sbin`` (where Debian puts
the daemons), and installed with ``apt-get`` when missing: as root, or through ``sudo -n`` (never a prompt).
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Sequence

from tests.clusters.daemons import ClusterError, run_command

log = logging.getLogger(__name__)

SBIN = ("/usr/local/sbin", "/usr/sbin", "/sbin")


def with_sbin(path: str) -> str:
    """``path`` (a ``PATH`` value) with the sbin folders appended where missing."""
    parts = [p for p in path.split(os.pathsep) if p]
    return os.pathsep.join(parts + [s for s in SBIN if s not in parts])


def find(name: str) -> str | None:
    """The full path of program ``name`` (None: not installed)."""
    return shutil.which(name, path=with_sbin(os.environ.get("PATH", "")))


def program(name: str) -> str:
    """The full path of program ``name``; :class:`ClusterError` when it is not installed."""
    found = find(name)
    if found is None:
        raise ClusterError(f"{name} is not installed (looked in PATH and {', '.join(SBIN)})")
    return found


def _as_root(command: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return command
    if find("sudo") is None:
        raise ClusterError(f"`{' '.join(command)}` needs root and sudo is not installed; run it as root")
    return ["sudo", "-n", *command]


def ensure_programs(programs: Sequence[str], deb_packages: Sequence[str], *, install: bool) -> None:
    """Install ``deb_packages`` when one of ``programs`` is missing (``install``), else refuse naming them."""
    missing = [p for p in programs if find(p) is None]
    if not missing:
        return
    if not install:
        raise ClusterError(f"missing {', '.join(missing)}; install the Debian packages {' '.join(deb_packages)} "
                           "(or run without --no-install)")
    if find("apt-get") is None:
        raise ClusterError(f"missing {', '.join(missing)} and apt-get is not available; install "
                           f"{' '.join(deb_packages)} by hand")
    log.info("missing %s: installing %s with apt-get", ", ".join(missing), " ".join(deb_packages))
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run_command(_as_root(["apt-get", "update", "-qq"]), env=env, timeout_s=600)
    run_command(_as_root(["apt-get", "install", "-y", "-qq", *deb_packages]), env=env, timeout_s=1200)
    still = [p for p in programs if find(p) is None]
    if still:
        raise ClusterError(f"installed {' '.join(deb_packages)} but {', '.join(still)} are still missing")
