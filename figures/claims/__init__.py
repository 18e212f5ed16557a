"""The papers' claims the reproduction report checks, kept as data: one module per paper, the shared
vocabulary (claim, setup, experiment, outcome, verdict levels) in :mod:`figures.claims.base`.

``CLAIMS`` lists every claim in report order; ``EXPERIMENTS`` maps each experiment preset the claims read
to the setup common to all its claims (written once in the report, at the head of that experiment's claims).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from figures.claims import (
    distserve,
    mooncake_capacity,
    mooncake_global_cache,
    mooncake_rejection,
    mooncake_scheduling,
    splitwise,
)
from figures.claims.base import Claim, Experiment

_MODULES = (distserve, mooncake_capacity, mooncake_scheduling, mooncake_global_cache, mooncake_rejection, splitwise)
CLAIMS: tuple[Claim, ...] = tuple(claim for module in _MODULES for claim in module.CLAIMS)
EXPERIMENTS: Mapping[str, Experiment] = MappingProxyType(
    {experiment.name: experiment for module in _MODULES for experiment in module.EXPERIMENTS})
