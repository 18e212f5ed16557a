"""Locating the public latency profiles the profile-based performance models read.

The profiles (splitwise-sim's ``perf_model.csv``, DistServe's fitted coefficients) are never copied
into this repository. A relative profile path such as ``distserve/max_num_tokens.csv`` is searched in,
in order: the explicit ``profiles_dir`` argument, ``$PERF_PROFILES_DIR``, ``./data/perf_profiles``,
``<repo root>/../shared/perf_profiles`` and ``../shared/perf_profiles`` relative to the current
directory. A missing file raises :class:`ProfileNotFoundError`, naming the file, every
directory searched and the upstream repository it is published in.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from types import MappingProxyType
from typing import Optional

from vocab.errors import UserError
from workloads.datadir import dedupe_paths, first_file

logger = logging.getLogger(__name__)

PROFILES_DIR_ENV = "PERF_PROFILES_DIR"
_REPO_ROOT = Path(__file__).resolve().parents[3]

SPLITWISE_CSV = "splitwise_sim/perf_model.csv"
DISTSERVE_JSON = {"distserve": "distserve/profiler-a100-80g.distserve.json",
                  "vllm": "distserve/profiler-a100-80g.vllm.json"}
DISTSERVE_MAX_TOKENS_CSV = "distserve/max_num_tokens.csv"

_SPLITWISE = "https://github.com/Mutinifni/splitwise-sim"
_DISTSERVE = "https://github.com/LLMServe/DistServe"
_DISTSERVE_DATA = "simdistserve/estimators/profile_data"

UPSTREAM_SOURCES: MappingProxyType[str, str] = MappingProxyType({
    SPLITWISE_CSV: f"{_SPLITWISE}, path data/perf_model.csv (MIT)",
    DISTSERVE_JSON["distserve"]: f"{_DISTSERVE}, path {_DISTSERVE_DATA}/profiler-a100-80g.distserve.json (Apache-2.0)",
    DISTSERVE_JSON["vllm"]: f"{_DISTSERVE}, path {_DISTSERVE_DATA}/profiler-a100-80g.vllm.json (Apache-2.0)",
    DISTSERVE_MAX_TOKENS_CSV: f"{_DISTSERVE}, path {_DISTSERVE_DATA}/max_num_tokens.csv (Apache-2.0)",
})


class ProfileNotFoundError(UserError, FileNotFoundError):
    """A profile file is in none of the searched directories; the message lists them and the upstream source."""

    def __str__(self) -> str:  # FileNotFoundError would otherwise format (errno, strerror)
        return str(self.args[0]) if self.args else ""


def search_dirs(profiles_dir: Optional[str | os.PathLike[str]] = None) -> list[Path]:
    """Directories searched for a relative profile path, in order, without duplicates."""
    candidates: list[Path] = []
    if profiles_dir:
        candidates.append(Path(profiles_dir).expanduser())
    env = os.environ.get(PROFILES_DIR_ENV, "")
    if env:
        candidates.append(Path(env).expanduser())
    cwd = Path.cwd()
    candidates += [cwd / "data" / "perf_profiles", _REPO_ROOT.parent / "shared" / "perf_profiles",
                   cwd.parent / "shared" / "perf_profiles"]
    return dedupe_paths(candidates)


def upstream_hint(relpath: str) -> str:
    """Where ``relpath`` is published (or that no source is known)."""
    source = UPSTREAM_SOURCES.get(relpath)
    return f"it is published upstream at {source}" if source else "no upstream source is known for this file"


def find_profile(relpath: str, profiles_dir: Optional[str | os.PathLike[str]] = None) -> Path:
    """The path of profile ``relpath`` (e.g. ``splitwise_sim/perf_model.csv``): the first directory holding it."""
    dirs = search_dirs(profiles_dir)
    found = first_file(dirs, relpath)
    if found is not None:
        logger.debug("profile %s resolved to %s", relpath, found)
        return found
    listing = "; ".join(str(d) for d in dirs)
    raise ProfileNotFoundError(
        f"performance profile {relpath!r} not found (searched, in order: {listing}); {upstream_hint(relpath)}. "
        f"Put it under one of these directories, pass profiles_dir, or set ${PROFILES_DIR_ENV}."
    )
