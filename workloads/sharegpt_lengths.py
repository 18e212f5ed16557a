"""Loader of ShareGPT request lengths: a CSV with the columns ``num_prefill_tokens`` (prompt tokens) and
``num_decode_tokens`` (output tokens), one row per request, no text and no timestamps (the table the
Sarathi-Serve authors published, ``sharegpt_lengths/`` beside the project; see its ``SOURCES.md``).

DistServe builds its ShareGPT workload by dropping every conversation turn whose prompt + output reaches
OPT's 2048-token context and those whose prompt and output are both under 4 tokens
(``evaluation/2-benchmark-serving/0-prepare-dataset.py`` in LLMServe/DistServe); its benchmark client and
its simulator then take a random sample of N of them (``random.sample``). The loader applies the same two
filters (``max_total_tokens``, ``min_tokens``) and, with a ``sample_seed``, shuffles the kept rows with a
seeded stream, so that the workload's first N requests (``max_requests``) are a random sample. Every
request gets its own hash ids (``ceil(prompt / block_size)`` of them): no two prompts share a prefix.
Counts are integers in ``[1, MAX_REQUEST_TOKENS]``; an error names the file and the line a row ends on.
"""

from __future__ import annotations

import csv
import logging
import re
from pathlib import Path
from typing import Optional

import numpy as np

from vocab.records import RequestSpec
from workloads.arrivals import RngStream, rng_stream
from workloads.base import LoadedRequests, Workload
from workloads.config import MAX_REQUEST_TOKENS, ShareGPTLengthsConfig
from workloads.datadir import resolve_trace_path
from workloads.errors import TraceFormatError, not_utf8_error

logger = logging.getLogger(__name__)

PROMPT_COLUMN = "num_prefill_tokens"
OUTPUT_COLUMN = "num_decode_tokens"


_COUNT = re.compile(r"\s*([0-9]{1,15})\s*")  # ASCII digits; longer: out of range anyway (never parsed)


def _count(path: Path, line_no: int, name: str, text: str) -> int:
    match = _COUNT.fullmatch(text)
    if match is None or not 1 <= int(match.group(1)) <= MAX_REQUEST_TOKENS:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise TraceFormatError(str(path), line_no, name,
                               f"got {shown!r}, expected an integer in [1, {MAX_REQUEST_TOKENS}]")
    return int(match.group(1))


def read_length_rows(path: str | Path) -> list[tuple[int, int]]:
    """Every ``(prompt, output)`` row of a ShareGPT length CSV, in file order.

    :class:`TraceFormatError` (file and line) for a missing column, a short row or a count that is not an
    integer >= 1.
    """
    path = Path(path)
    reader = None
    try:
        with path.open("r", encoding="utf-8-sig", newline="") as fh:
            reader = csv.reader(fh, strict=True)
            header = next(reader, [])
            missing = [c for c in (PROMPT_COLUMN, OUTPUT_COLUMN) if c not in header]
            if missing:
                raise TraceFormatError(str(path), 1, "header", f"got {','.join(header)!r}, expected the columns "
                                       f"{PROMPT_COLUMN} and {OUTPUT_COLUMN} (missing: {', '.join(missing)})")
            i_prompt, i_output = header.index(PROMPT_COLUMN), header.index(OUTPUT_COLUMN)
            rows = []
            for fields in reader:
                line_no = reader.line_num  # the line the row ends on (a quoted field may span lines)
                if not fields:
                    continue
                if len(fields) <= max(i_prompt, i_output):
                    raise TraceFormatError(str(path), line_no, "row",
                                           f"got {len(fields)} fields, expected {len(header)} ({','.join(header)})")
                rows.append((_count(path, line_no, PROMPT_COLUMN, fields[i_prompt]),
                             _count(path, line_no, OUTPUT_COLUMN, fields[i_output])))
    except UnicodeDecodeError:
        raise not_utf8_error(path) from None
    except csv.Error as exc:  # a NUL byte, a stray quote, a field over the csv module's size limit
        line = reader.line_num if reader is not None else 1
        raise TraceFormatError(str(path), max(line, 1), "row", f"not a valid CSV row ({exc})") from None
    if not rows:
        raise TraceFormatError(str(path), 2, "row", "no data rows after the header")
    return rows


def load_sharegpt_lengths(path: str | Path, block_size: int = 512, max_total_tokens: Optional[int] = 2048,
                          min_tokens: int = 4, sample_seed: Optional[int] = 0) -> LoadedRequests:
    """The rows of ``path`` that pass DistServe's filters, shuffled by ``sample_seed`` (None: file order), as
    untimed specs. ``stats`` counts the rows read and each filter's drops."""
    rows = read_length_rows(path)
    too_long = too_short = 0
    kept: list[tuple[int, int]] = []
    for prompt, output in rows:
        if max_total_tokens is not None and prompt + output >= max_total_tokens:
            too_long += 1
        elif prompt < min_tokens and output < min_tokens:
            too_short += 1
        else:
            kept.append((prompt, output))
    if not kept:
        raise TraceFormatError(str(path), 2, "row", f"no row passes the filters (prompt + output < {max_total_tokens}, "
                               f"prompt or output >= {min_tokens} tokens)")
    if sample_seed is not None:
        order = rng_stream(sample_seed, RngStream.SAMPLE).permutation(len(kept))
        kept = [kept[i] for i in order]
    specs = []
    next_id = 0
    for prompt, output in kept:
        n_blocks = -(-prompt // block_size)
        specs.append(RequestSpec(request_id=len(specs), arrival_s=0.0, input_length=prompt, output_length=output,
                                 hash_ids=tuple(range(next_id, next_id + n_blocks)), block_size=block_size))
        next_id += n_blocks
    prompts = np.array([p for p, _ in kept])
    stats = {"n_rows": len(rows), "n_kept_rows": len(kept), "n_dropped_too_long": too_long,
             "n_dropped_too_short": too_short, "max_total_tokens": max_total_tokens, "min_tokens": min_tokens,
             "sample_seed": sample_seed, "kept_input_len_mean": float(prompts.mean())}
    logger.debug("%s: %d of %d rows kept (%d too long, %d too short)", path, len(kept), len(rows), too_long, too_short)
    return LoadedRequests(specs=tuple(specs), timed=False, source=str(path), stats=stats)


class ShareGPTLengthsWorkload(Workload):
    """ShareGPT request lengths, filtered and sampled as DistServe does; no prefix sharing."""

    kind = "sharegpt_lengths"
    config_cls = ShareGPTLengthsConfig

    def __init__(self, cfg: ShareGPTLengthsConfig, data_dir: Optional[str] = None) -> None:
        super().__init__(cfg, data_dir)
        self.cfg: ShareGPTLengthsConfig = cfg
        self.path = resolve_trace_path(cfg.file, data_dir)

    def _load(self) -> LoadedRequests:
        cfg = self.cfg
        return load_sharegpt_lengths(self.path, cfg.block_size, cfg.max_total_tokens, cfg.min_tokens, cfg.sample_seed)
