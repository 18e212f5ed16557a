"""The environment a started server gets: an allow-list of what servers need, never the harness's secrets.

:func:`child_environment` keeps from ``base`` (normally the harness's own ``os.environ``) only names a
server needs (``ALLOWED_NAMES``, names starting with one of ``ALLOWED_PREFIXES``: paths, locale, Python,
the engines, CUDA/NCCL/OpenMP and the libraries they load, Mooncake, Hugging Face caches) and, of those,
drops any whose name marks a secret (a ``_``-separated part ending in KEY, TOKEN, SECRET, PASSWORD,
PASSWD, PASSPHRASE or CREDENTIAL(S), e.g. ``HF_TOKEN``, ``WANDB_API_KEY``). Everything in ``extra`` is
the caller's explicit choice and is kept as given, secrets included. The names dropped (never their
values) are logged at debug level.

Launch code that wants a variable in a server sets it explicitly (``VllmServerSpec.extra_env``, the
deployment's ``env``): :meth:`systems.launch.processes.ManagedProcess.start` passes every name a caller
set or changed as ``extra``, and filters only what was merely copied from ``os.environ``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Optional

logger = logging.getLogger(__name__)

ALLOWED_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "HOSTNAME", "LANG", "LANGUAGE", "TZ", "TERM",
    "TMPDIR", "TMP", "TEMP", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "LD_PRELOAD", "LIBRARY_PATH", "CPATH",
    "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "PKG_CONFIG_PATH", "CC", "CXX", "GLIBC_TUNABLES",
    "DO_NOT_TRACK", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
    "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
})

ALLOWED_PREFIXES = (
    "LC_", "XDG_", "PYTHON", "CONDA_",
    "VLLM_", "SGLANG_", "SGL_", "LMCACHE_", "NIXL_", "UCX_", "MC_", "MOONCAKE_", "DISAGG_",
    "CUDA_", "CUBLAS", "CUDNN_", "NCCL_", "NVIDIA_", "TORCH", "PYTORCH_", "TRITON_", "FLASHINFER_",
    "OUTLINES_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TOKENIZERS_", "SAFETENSORS_",
    "OMP_", "MKL_", "KMP_", "OPENBLAS_", "ONEDNN_", "DNNL_", "CCL_", "MALLOC_", "GLOO_", "RAY_",
)

_SECRET_PART = re.compile(r"(KEY|KEYS|TOKEN|TOKENS|SECRET|SECRETS|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|CREDENTIALS)$")


def is_secret_name(name: str) -> bool:
    """Whether ``name`` marks a secret: one of its ``_``-separated parts ends in KEY, TOKEN, SECRET,
    PASSWORD, PASSWD, PASSPHRASE or CREDENTIAL(S) (``HF_TOKEN`` is, ``TOKENIZERS_PARALLELISM`` is not)."""
    return any(_SECRET_PART.search(part) for part in name.upper().split("_") if part)


def is_allowed_name(name: str) -> bool:
    """Whether a server may inherit ``name``: on the allow-list and not a secret."""
    return (name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)) and not is_secret_name(name)


def child_environment(base: Mapping[str, str], extra: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The allow-listed part of ``base``, updated with all of ``extra`` (kept as given, secrets included)."""
    extra = dict(extra or {})
    env = {name: value for name, value in base.items() if name in extra or is_allowed_name(name)}
    dropped = sorted(name for name in base if name not in env)
    if dropped:
        logger.debug("child environment: dropped %d inherited name(s): %s", len(dropped), ", ".join(dropped))
    env.update(extra)
    return env


def split_inherited(env: Mapping[str, str], inherited_from: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``env`` split into (names copied unchanged from ``inherited_from``, names the caller set or changed)."""
    inherited = {k: v for k, v in env.items() if inherited_from.get(k) == v}
    explicit = {k: v for k, v in env.items() if k not in inherited}
    return inherited, explicit
