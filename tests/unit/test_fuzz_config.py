"""Property-based tests of config validation: any value for a workload, arrival, validity, system or
engine option gives a valid config or one :class:`ConfigError` naming the option; never another exception
type, and never a config that is accepted and then hangs or crashes when the workload is built."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from harness.config import to_config, validate
from vocab.errors import ConfigError, UserError
from workloads import build_workload
from workloads.arrivals import arrival_times
from workloads.config import ArrivalConfig
from workloads.errors import WorkloadError

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e308, 1e-308, 5e-324, 1e-300, 0.5, 2.0, 4.0]),
    st.text(max_size=6), st.sampled_from(["trace", "poisson", "gamma", "closed_loop", "???"]),
)
ARRIVAL_KEYS = ("kind", "rate_rps", "cv", "time_scale", "concurrency", "seed")
EDGES = st.sampled_from([0, -1, 0.0, -0.0, 1e-300, 5e-324, 1e-5, 1e5, 1e7, 1e308, math.nan, math.inf, -math.inf,
                         10**30, True])
PLAUSIBLE = st.floats(0.05, 50.0)


def _arrival_value(key: str) -> st.SearchStrategy[Any]:
    if key == "kind":
        return st.one_of(st.sampled_from(["trace", "poisson", "gamma", "closed_loop"]), VALUES)
    if key in ("concurrency", "seed"):
        return st.one_of(st.integers(0, 16), EDGES, VALUES)
    return st.one_of(PLAUSIBLE, EDGES, EDGES, VALUES)


@st.composite
def arrival_changes(draw: Any) -> dict[str, Any]:
    keys = draw(st.lists(st.sampled_from(ARRIVAL_KEYS), unique=True, max_size=4))
    return {k: draw(_arrival_value(k)) for k in keys}


@FUZZ
@given(changes=arrival_changes())
def test_arrival_config_is_valid_or_names_the_option(changes: dict[str, Any]) -> None:
    try:
        cfg = ArrivalConfig(**changes)
    except WorkloadError as exc:
        assert str(exc).startswith("workload.arrival."), str(exc)
        return
    if any(v == "???" for v in changes.values()):
        return  # a missing value is OmegaConf's to report (and Workload's missing_keys check)
    n = 50
    try:
        times = arrival_times(n, cfg, np.linspace(0.0, 3600.0, n))
    except WorkloadError as exc:
        assert str(exc).startswith("workload.arrival."), str(exc)
        return
    assert times.shape == (n,) and np.isfinite(times).all() and (np.diff(times) >= 0).all()


SHARED_PREFIX_KEYS = ("num_groups", "prompts_per_group", "shared_prefix_len", "question_len", "output_len", "turns",
                      "zipf_alpha", "block_size", "max_input_len", "seed", "max_requests", "block_tokens")
COMPOSED_KEYS = (
    *(f"workload.arrival.{k}" for k in ARRIVAL_KEYS), *(f"workload.{k}" for k in SHARED_PREFIX_KEYS),
    "validity.min_duration_s", "validity.min_requests", "validity.max_error_rate", "validity.ci_confidence",
    "validity.max_ci_relative_width", "system.gpu_budget", "system.colocated_instances", "engine.sample_interval_s",
    "engine.colocated.tp", "engine.colocated.pp",
)
SMALL = st.one_of(st.integers(1, 64), st.sampled_from([16, 32, 128]))


def _small_enough(workload: Any) -> bool:
    """Build the workload only when it is small (a valid config may still ask for many requests)."""
    sessions = workload.num_groups * workload.prompts_per_group * workload.turns
    return sessions <= 500 and workload.shared_prefix_len + workload.turns * (workload.question_len +
                                                                               workload.output_len) <= 100_000


@FUZZ
@given(changes=st.dictionaries(st.sampled_from(COMPOSED_KEYS), st.one_of(VALUES, SMALL, EDGES, PLAUSIBLE), min_size=1,
                               max_size=4))
def test_composed_config_is_valid_or_one_config_error(compose, changes: dict[str, Any]) -> None:
    raw = copy.deepcopy(_base(compose))
    for key, value in changes.items():
        try:
            OmegaConf.update(raw, key, value, merge=True)
        except OmegaConfBaseException:
            return  # refused while composing, as Hydra refuses the override (a ConfigError naming it)
    try:
        config = validate(raw)
    except ConfigError as exc:
        assert str(exc).split(":")[0].split("=")[0] in {*COMPOSED_KEYS, *(k.rsplit(".", 1)[0] for k in COMPOSED_KEYS),
                                                        "system.gpu_budget", "engine.<pool>.tp/pp"} or any(
            k in str(exc) for k in changes), str(exc)
        return
    if "???" in changes.values():
        return
    if _small_enough(config.workload):
        try:
            requests = build_workload(config.workload).requests()
        except WorkloadError as exc:
            assert str(exc).startswith(("workload", "workload.")), str(exc)
            return
        assert len(requests) >= 1 and all(math.isfinite(s.arrival_s) for s in requests.specs)


_BASE: dict[str, Any] = {}


def _base(compose: Any) -> Any:
    """The default composed config (composed once per session; Hydra composition is slow)."""
    if "raw" not in _BASE:
        _BASE["raw"] = compose(["workload=shared_prefix", "workload.arrival.rate_rps=2.0"], validated=False)
        to_config(_BASE["raw"])  # the base itself is valid
    return _BASE["raw"]


def test_the_fuzzed_base_config_is_valid(compose) -> None:
    assert validate(copy.deepcopy(_base(compose))).workload.kind == "shared_prefix"


def test_user_errors_are_the_only_refusals() -> None:
    """The error types the properties above accept are the project's user errors (exit code 2)."""
    assert issubclass(ConfigError, UserError) and issubclass(WorkloadError, UserError)
