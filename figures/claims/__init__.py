"""The papers' claims the reproduction report checks, kept as data: one module per paper, the shared
vocabulary (claim, setup cell, outcome, verdict levels) in :mod:`figures.claims.base`."""

from __future__ import annotations

from figures.claims import distserve, mooncake_capacity, mooncake_scheduling, splitwise
from figures.claims.base import Claim

CLAIMS: tuple[Claim, ...] = (*distserve.CLAIMS, *mooncake_capacity.CLAIMS, *mooncake_scheduling.CLAIMS, *splitwise.CLAIMS)
