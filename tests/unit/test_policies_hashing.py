"""Chained prefix-block hashes: chaining, full blocks only, salts, workload block ids, cross-process stability."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from systems.policies import block_hashes, byte_block_hashes, chain_block_ids, spec_block_hashes
from vocab.records import RequestSpec

ROOT = Path(__file__).resolve().parents[2]


def test_one_hash_per_full_block_and_partial_tail_dropped() -> None:
    assert len(block_hashes(list(range(10)), 4)) == 2
    assert block_hashes(list(range(3)), 4) == ()
    assert block_hashes(list(range(8)), 4) == block_hashes(list(range(11)), 4)
    assert all(0 <= h < 2**63 for h in block_hashes(list(range(64)), 4))


def test_hash_of_block_k_depends_on_every_block_before_it() -> None:
    base = list(range(16))
    late = base[:9] + [999] + base[10:]  # block 2 differs
    early = [999] + base[1:]  # block 0 differs
    h, h_late, h_early = (block_hashes(t, 4) for t in (base, late, early))
    assert h_late[:2] == h[:2] and h_late[2] != h[2] and h_late[3] != h[3]
    assert not set(h_early) & set(h)
    # the same block content at a different position (after a different prefix) hashes differently
    assert block_hashes([1, 2, 1, 2], 2)[0] != block_hashes([1, 2, 1, 2], 2)[1]


def test_salt_isolates_tenants() -> None:
    tokens = list(range(4096))
    a, b, plain = (
        block_hashes(tokens, 128, "tenant-a"),
        block_hashes(tokens, 128, "tenant-b"),
        block_hashes(tokens, 128),
    )
    assert len(a) == len(b) == len(plain) == 32
    assert not set(a) & set(b) and not set(a) & set(plain)
    assert block_hashes(tokens, 128, "tenant-a") == a


def test_domains_never_collide() -> None:
    ids = [5, 6, 7]
    assert not set(block_hashes(ids, 1)) & set(chain_block_ids(ids))


def test_invalid_input_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        block_hashes([1, 2], 0)
    with pytest.raises(ValueError):
        block_hashes([1.5, 2.0], 1)  # type: ignore[list-item]
    with pytest.raises(ValueError):
        block_hashes([2**64, 1], 1)
    with pytest.raises(ValueError):
        byte_block_hashes(b"abc", 0)


def test_byte_chunks_share_prefixes() -> None:
    a = byte_block_hashes(b"x" * 100 + b"tail-a", 16)
    b = byte_block_hashes(b"x" * 100 + b"tail-b-longer", 16)
    assert len(a) == 6 and a == b[:6]


def test_spec_hashes_chain_hash_ids_drop_partial_block_and_salt_by_tenant() -> None:
    spec = RequestSpec(0, 0.0, input_length=1300, output_length=10, hash_ids=(11, 12, 13), block_size=512)
    assert spec_block_hashes(spec) == chain_block_ids((11, 12))
    assert spec_block_hashes(spec, full_blocks_only=False) == chain_block_ids((11, 12, 13))
    other = RequestSpec(1, 0.0, input_length=1024, output_length=10, hash_ids=(11, 99), block_size=512)
    assert spec_block_hashes(other)[0] == spec_block_hashes(spec)[0]
    assert spec_block_hashes(other)[1] != spec_block_hashes(spec)[1]
    tenant = RequestSpec(
        2, 0.0, input_length=1024, output_length=10, hash_ids=(11, 12), block_size=512, tenant="t"
    )
    assert not set(spec_block_hashes(tenant)) & set(spec_block_hashes(spec))


_GOLDEN_SCRIPT = (
    "import json; from systems.policies import block_hashes, chain_block_ids, byte_block_hashes;"
    "print(json.dumps([block_hashes(list(range(1000)), 128, 's'), chain_block_ids([3, 1, 4]),"
    " byte_block_hashes('héllo wörld'.encode() * 9, 16)]))"
)


@pytest.mark.integration
def test_hashes_are_identical_in_another_process() -> None:
    here = [
        block_hashes(list(range(1000)), 128, "s"),
        chain_block_ids([3, 1, 4]),
        byte_block_hashes("héllo wörld".encode() * 9, 16),
    ]
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", _GOLDEN_SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(out.stdout) == [list(h) for h in here]


def test_hashes_are_pinned() -> None:
    """A change of encoding or algorithm changes every stored routing decision: make it a visible choice."""
    assert block_hashes(list(range(8)), 4) == (8508059330612273516, 665324506631435846)
