"""Synthetic shared-prefix workload: groups of sessions that share a system prompt, optionally multi-turn.

Like SGLang's generated-shared-prefix benchmark, with Zipf-skewed group popularity and multi-turn history.
Sessions = ``num_groups * prompts_per_group``; with ``zipf_alpha == 0`` each group has exactly
``prompts_per_group`` sessions, otherwise each session's group is drawn from Zipf(alpha) over the groups
(group 0 is rank 1, the most popular). The prompt of turn ``t`` of a session is::

    group prefix + (question_0 + answer_0) + ... + (question_{t-1} + answer_{t-1}) + question_t

Questions and answers are unique to their session and turn. All content is counted in blocks of
``block_size`` tokens; each distinct block has its own hash id (group prefixes first, then questions and
answers), so equal ids mean equal content and nothing else. Requests are a seeded random interleaving of
the sessions that keeps each session's turns in order.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional

import numpy as np

from vocab.records import RequestSpec
from workloads.arrivals import RngStream, rng_stream
from workloads.base import LoadedRequests, Workload
from workloads.config import SharedPrefixConfig
from workloads.errors import WorkloadError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BlockLayout:
    """Hash-id numbering: group ``g``'s prefix, then per (session, turn) a question and an answer."""

    prefix_blocks: int
    question_blocks: int
    answer_blocks: int
    num_groups: int
    turns: int

    def prefix_ids(self, group: int) -> list[int]:
        start = group * self.prefix_blocks
        return list(range(start, start + self.prefix_blocks))

    def _turn_start(self, session: int, turn: int) -> int:
        per_turn = self.question_blocks + self.answer_blocks
        return self.num_groups * self.prefix_blocks + (session * self.turns + turn) * per_turn

    def question_ids(self, session: int, turn: int) -> list[int]:
        start = self._turn_start(session, turn)
        return list(range(start, start + self.question_blocks))

    def answer_ids(self, session: int, turn: int) -> list[int]:
        start = self._turn_start(session, turn) + self.question_blocks
        return list(range(start, start + self.answer_blocks))


def zipf_weights(num_groups: int, alpha: float) -> np.ndarray:
    """Probabilities of groups 0..num_groups-1 under Zipf(alpha): p(rank k) proportional to k**-alpha."""
    ranks = np.arange(1, num_groups + 1, dtype=np.float64)
    weights = ranks ** (-float(alpha))
    return weights / weights.sum()


def session_groups(cfg: SharedPrefixConfig) -> np.ndarray:
    """The group of every session (exact ``prompts_per_group`` per group when ``zipf_alpha == 0``)."""
    n_sessions = cfg.num_groups * cfg.prompts_per_group
    if cfg.zipf_alpha == 0:
        return np.repeat(np.arange(cfg.num_groups), cfg.prompts_per_group)
    rng = rng_stream(cfg.seed, RngStream.GROUP_CHOICE)
    return rng.choice(cfg.num_groups, size=n_sessions, p=zipf_weights(cfg.num_groups, cfg.zipf_alpha))


def interleave_turns(n_sessions: int, turns: int, seed: int) -> list[tuple[int, int]]:
    """A seeded random order of all (session, turn) pairs in which each session's turns stay in order."""
    order = np.repeat(np.arange(n_sessions), turns)
    rng_stream(seed, RngStream.INTERLEAVE).shuffle(order)
    next_turn = [0] * n_sessions
    pairs = []
    for session in order.tolist():
        pairs.append((session, next_turn[session]))
        next_turn[session] += 1
    return pairs


def prompt_length(cfg: SharedPrefixConfig, turn: int) -> int:
    """Tokens in the prompt of turn ``turn`` (0-based)."""
    return cfg.shared_prefix_len + turn * (cfg.question_len + cfg.output_len) + cfg.question_len


def _too_long(cfg: SharedPrefixConfig, session: int, turn: int, length: int) -> WorkloadError:
    first_bad_turn = next(t for t in range(cfg.turns) if prompt_length(cfg, t) > (cfg.max_input_len or 0))
    return WorkloadError(
        f"workload {cfg.name!r}: session {session} turn {turn} has a {length}-token prompt "
        f"(= shared_prefix_len {cfg.shared_prefix_len} + {turn} * (question_len {cfg.question_len} "
        f"+ output_len {cfg.output_len}) + question_len {cfg.question_len}), more than "
        f"workload.max_input_len={cfg.max_input_len} (every session's turn {first_bad_turn} and later would be); "
        "lower workload.turns, workload.shared_prefix_len, workload.question_len or workload.output_len, "
        "or raise workload.max_input_len"
    )


def generate_shared_prefix(cfg: SharedPrefixConfig) -> LoadedRequests:
    """All requests of the workload in interleaved order (``arrival_s`` left at 0; not ``timed``)."""
    bs = cfg.block_size
    layout = BlockLayout(
        prefix_blocks=cfg.shared_prefix_len // bs,
        question_blocks=cfg.question_len // bs,
        answer_blocks=-(-cfg.output_len // bs),
        num_groups=cfg.num_groups,
        turns=cfg.turns,
    )
    groups = session_groups(cfg)
    n_sessions = len(groups)
    specs: list[RequestSpec] = []
    for session, turn in interleave_turns(n_sessions, cfg.turns, cfg.seed):
        length = prompt_length(cfg, turn)
        if cfg.max_input_len is not None and length > cfg.max_input_len:
            raise _too_long(cfg, session, turn, length)
        group = int(groups[session])
        ids = layout.prefix_ids(group)
        for past in range(turn):
            ids += layout.question_ids(session, past) + layout.answer_ids(session, past)
        ids += layout.question_ids(session, turn)
        specs.append(
            RequestSpec(
                request_id=len(specs),
                arrival_s=0.0,
                input_length=length,
                output_length=cfg.output_len,
                hash_ids=tuple(ids),
                block_size=bs,
                prefix_group=group,
                shared_prefix_len=cfg.shared_prefix_len,
                session_id=session,
                turn=turn,
            )
        )
    counts = np.bincount(groups, minlength=cfg.num_groups)
    stats = {
        "n_sessions": n_sessions,
        "num_groups": cfg.num_groups,
        "turns": cfg.turns,
        "zipf_alpha": cfg.zipf_alpha,
        "generator_seed": cfg.seed,
        "group_session_counts": [int(c) for c in counts],
        "max_prompt_len": prompt_length(cfg, cfg.turns - 1),
    }
    return LoadedRequests(specs=tuple(specs), timed=False, source="generated:shared_prefix", stats=stats)


class SharedPrefixWorkload(Workload):
    """Generated groups of sessions sharing a prefix (see module docstring)."""

    kind = "shared_prefix"
    config_cls = SharedPrefixConfig

    def __init__(self, cfg: SharedPrefixConfig, data_dir: Optional[str] = None) -> None:
        super().__init__(cfg, data_dir)
        self.cfg: SharedPrefixConfig = cfg

    def _load(self) -> LoadedRequests:
        return generate_shared_prefix(self.cfg)
