"""A sweep job's folder name, derived from its overrides so that running a sweep again finds each job's
earlier folder (resume), whatever launcher ran it and in whichever order.

``hydra.sweep.subdir`` is ``${job_dirname:${hydra.job.override_dirname}}``: Hydra's sorted
``key=value,key=value`` string of the job's command-line overrides (less the keys in
``hydra.job.config.override_dirname.exclude_keys``: those that do not change results), made safe as one
folder name: characters other than letters, digits and ``._=,+-@`` become ``_``, and a name longer than
:data:`MAX_NAME` keeps its head and gets a short hash of the whole string, so two long names never collide.
A job with no overrides is ``default``. Secrets in the overrides (a URL's password, ``*_TOKEN=...``) are
redacted first (:mod:`harness.redaction`), so they never appear in a path.

The resolver is registered when this module is imported: Hydra resolves the subdir in the process that
runs the job (a joblib worker, a Slurm job, a Ray task), and every such process imports the harness's
callbacks (:mod:`harness.hydra_checks`), which import this module, before it does.
"""

from __future__ import annotations

import hashlib
import re

from omegaconf import OmegaConf

from harness.redaction import redact_text

RESOLVER = "job_dirname"
MAX_NAME = 120
DEFAULT_NAME = "default"
_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+\-@]")


def job_dirname(override_dirname: str) -> str:
    """The folder name of a job whose overrides Hydra joined into ``override_dirname``."""
    text = str(override_dirname or "")
    if not text:
        return DEFAULT_NAME
    text = redact_text(text)
    safe = _UNSAFE.sub("_", text)
    if safe in (".", ".."):
        safe = safe.replace(".", "_")
    if len(safe) > MAX_NAME:
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
        safe = f"{safe[:MAX_NAME - 13]}~{digest}"
    return safe


def register_resolver() -> None:
    """Register ``${job_dirname:...}`` with OmegaConf (idempotent)."""
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, job_dirname)


register_resolver()
