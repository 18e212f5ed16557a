"""Readers of the DistServe authors' measured A100 runs (``distserve_opt13b_a100/`` beside the project; see its
``SOURCES.md``) and the ``distserve_requests`` workload built from them.

Each run ``<system>[-<layout>]-<N>-<rate>`` has two files:

- ``measured/<run>.exp``: line 1 is a Python literal (single-quoted, not JSON) holding a list of dicts, one per
  request, with ``prompt_len``, ``output_len``, ``issue_time``, ``first_token_time`` and ``complete_time``
  (seconds, a monotonic clock) and the derived ``ttft_ms``/``tpot_ms``/``latency_ms``; the lines after it are a
  summary block that is not a literal and is never read. Line 1 is parsed with :func:`ast.literal_eval`, which
  builds literals only and never runs code, after a size check; anything else is a :class:`TraceFormatError`
  naming the file, the line and the request.
- ``workload/<run>.exp``: JSON, a list of ``{prompt_len, output_len, start_time}`` (seconds from the first
  request): the requests and arrivals the client issued.

The workload kind ``distserve_requests`` replays one ``workload/`` file with its own arrivals
(``arrival.kind=trace``), or takes the distinct requests of a folder's files as a request-length source with
a synthetic arrival process (DistServe's ShareGPT lengths, as the paper's experiments sampled them: the 24
published runs are each the first N of one sample of 1,600 requests).
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from vocab.records import RequestSpec
from workloads.arrivals import RngStream, rng_stream
from workloads.base import LoadedRequests, Workload
from workloads.config import MAX_REQUEST_TOKENS, DistServeRequestsConfig
from workloads.datadir import resolve_trace_path
from workloads.errors import TraceFormatError, not_utf8_error

MAX_LINE_BYTES = 64 << 20  # a measured run's first line (the 24 published ones are at most 300 kB)
MEASURED_KEYS = ("prompt_len", "output_len", "issue_time", "first_token_time", "complete_time")
WORKLOAD_KEYS = ("prompt_len", "output_len", "start_time")
RUN_NAME = re.compile(r"(?P<system>distserve|vllm)(?:-(?P<layout>c\d\dd\d\d))?-(?P<n>\d+)-(?P<rate>\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class RunName:
    """What a run's file name says: the system, the layout tag (``c21d12``: prefill TP 2 PP 1, decode TP 1
    PP 2; ``""`` when the name has none), the number of requests and the Poisson rate (req/s)."""

    name: str
    system: str
    layout: str
    n_requests: int
    rate_rps: float


def parse_run_name(name: str) -> RunName:
    """The parts of a run name such as ``distserve-c21d12-600-6`` (``ValueError`` naming the expected form)."""
    stem = name[:-4] if name.endswith(".exp") else name
    match = RUN_NAME.fullmatch(stem)
    if match is None:
        raise ValueError(f"run name {name!r}: expected <distserve|vllm>[-c<tp_p><pp_p>d<tp_d><pp_d>]-<N>-<rate>, "
                         "e.g. distserve-c21d12-600-6 or vllm-300-3")
    return RunName(stem, match["system"], match["layout"] or "", int(match["n"]), float(match["rate"]))


@dataclass(frozen=True)
class MeasuredRequest:
    """One request of a measured run; times in seconds on the run's clock."""

    prompt_len: int
    output_len: int
    issue_s: float
    first_token_s: float
    complete_s: float

    @property
    def ttft_ms(self) -> float:
        """First token - issue, as DistServe's client computes it."""
        return (self.first_token_s - self.issue_s) * 1e3

    @property
    def tpot_ms(self) -> float:
        """(Completion - first token) / (output_len - 1); 0 for a one-token output, as DistServe's client."""
        return (self.complete_s - self.first_token_s) * 1e3 / (self.output_len - 1) if self.output_len > 1 else 0.0


def _length(path: Path, line: int, where: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_REQUEST_TOKENS:
        raise TraceFormatError(str(path), line, f"{where}.{key}",
                               f"got {value!r:.40}, expected an integer in [1, {MAX_REQUEST_TOKENS}]")
    return value


def _seconds(path: Path, line: int, where: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise TraceFormatError(str(path), line, f"{where}.{key}", f"got {value!r:.40}, expected a finite number >= 0")
    return float(value)


def _entries(path: Path, line: int, data: Any, keys: tuple[str, ...]) -> list[dict[str, Any]]:
    if not isinstance(data, list) or not data:
        raise TraceFormatError(str(path), line, "requests", f"got {type(data).__name__}, expected a non-empty list "
                               "of dicts, one per request")
    for i, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise TraceFormatError(str(path), line, f"request {i}", f"got {type(entry).__name__}, expected a dict")
        missing = [k for k in keys if k not in entry]
        if missing:
            raise TraceFormatError(str(path), line, f"request {i}", f"missing {', '.join(missing)} (expected the "
                                   f"keys {', '.join(keys)})")
    return data


def _first_line(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            raw = fh.readline(MAX_LINE_BYTES + 1)
    except OSError as exc:
        raise TraceFormatError(str(path), 1, "file", f"cannot be read ({exc.strerror or exc})") from None
    if len(raw) > MAX_LINE_BYTES:
        raise TraceFormatError(str(path), 1, "requests", f"line longer than {MAX_LINE_BYTES >> 20} MiB; expected "
                               "one line holding the list of requests")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise not_utf8_error(path) from None


def read_measured_run(path: str | Path) -> list[MeasuredRequest]:
    """The requests of a ``measured/*.exp`` file in issue order (see the module docstring)."""
    path = Path(path)
    text = _first_line(path).strip()
    try:
        data = ast.literal_eval(text)  # literals only: a name, a call or an operator is a ValueError
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        problem = type(exc).__name__ if isinstance(exc, MemoryError | RecursionError) else str(exc).splitlines()[0]
        raise TraceFormatError(str(path), 1, "requests", f"not a Python literal list of dicts ({problem:.80}); "
                               "expected [{'prompt_len': ..., 'output_len': ..., 'issue_time': ..., ...}, ...]") from None
    out = []
    for i, entry in enumerate(_entries(path, 1, data, MEASURED_KEYS)):
        where = f"request {i}"
        req = MeasuredRequest(*(_length(path, 1, where, k, entry[k]) for k in MEASURED_KEYS[:2]),
                              *(_seconds(path, 1, where, k, entry[k]) for k in MEASURED_KEYS[2:]))
        if not req.issue_s <= req.first_token_s <= req.complete_s:
            raise TraceFormatError(str(path), 1, where, f"times out of order: issue {req.issue_s}, first token "
                                   f"{req.first_token_s}, complete {req.complete_s} (expected issue <= first <= complete)")
        out.append(req)
    return sorted(out, key=lambda r: r.issue_s)


def read_workload_run(path: str | Path) -> list[tuple[int, int, float]]:
    """``(prompt_len, output_len, start_s)`` of a ``workload/*.exp`` JSON file, in arrival order."""
    path = Path(path)
    try:
        with path.open("r", encoding="utf-8") as fh:
            data = json.load(fh)
    except UnicodeDecodeError:
        raise not_utf8_error(path) from None
    except json.JSONDecodeError as exc:
        raise TraceFormatError(str(path), exc.lineno, "requests", f"not JSON ({exc.msg})") from None
    except RecursionError:
        raise TraceFormatError(str(path), 1, "requests", "nested too deeply; expected a JSON list of objects") from None
    rows = []
    for i, entry in enumerate(_entries(path, 1, data, WORKLOAD_KEYS)):
        where = f"request {i}"
        rows.append((_length(path, 1, where, "prompt_len", entry["prompt_len"]),
                     _length(path, 1, where, "output_len", entry["output_len"]),
                     _seconds(path, 1, where, "start_time", entry["start_time"])))
    return sorted(rows, key=lambda r: r[2])


def workload_files(path: Path) -> list[Path]:
    """``path`` itself, or the ``*.exp`` files of the folder ``path`` in name order."""
    if not path.is_dir():
        return [path]
    files = sorted(path.glob("*.exp"))
    if not files:
        raise TraceFormatError(str(path), 1, "folder", "has no *.exp workload files")
    return files


def distinct_requests(runs: list[list[tuple[int, int, float]]]) -> list[tuple[int, int, float]]:
    """The requests of several runs of one request sample, each once: their multiset union over
    ``(prompt, output)`` (a pair as many times as the run that has it most), largest run first. DistServe's
    runs each take the first N of one sample, so this is the largest run's requests."""
    counts: Counter[tuple[int, int]] = Counter()
    out = []
    for rows in sorted(runs, key=len, reverse=True):
        seen: Counter[tuple[int, int]] = Counter()
        for row in rows:
            key = (row[0], row[1])
            seen[key] += 1
            if seen[key] > counts[key]:
                counts[key] += 1
                out.append(row)
    return out


def load_distserve_requests(path: str | Path, block_size: int = 512, sample_seed: Optional[int] = 0) -> LoadedRequests:
    """One workload file with its arrivals (timed), or the distinct requests of a folder's files
    (:func:`distinct_requests`) shuffled by ``sample_seed`` (untimed: a synthetic arrival process applies)."""
    path = Path(path)
    files = workload_files(path)
    timed = not path.is_dir()
    rows = read_workload_run(files[0]) if timed else distinct_requests([read_workload_run(f) for f in files])
    if not timed and sample_seed is not None:
        order = rng_stream(sample_seed, RngStream.SAMPLE).permutation(len(rows))
        rows = [rows[i] for i in order]
    specs = []
    next_id = 0
    for prompt, output, start in rows:
        n_blocks = -(-prompt // block_size)
        specs.append(RequestSpec(request_id=len(specs), arrival_s=start if timed else 0.0, input_length=prompt,
                                 output_length=output, hash_ids=tuple(range(next_id, next_id + n_blocks)),
                                 block_size=block_size))
        next_id += n_blocks
    stats = {"n_files": len(files), "n_rows": len(rows), "sample_seed": sample_seed,
             "input_len_mean": sum(r[0] for r in rows) / len(rows), "output_len_mean": sum(r[1] for r in rows) / len(rows)}
    return LoadedRequests(specs=tuple(specs), timed=timed, source=str(path), stats=stats)


class DistServeRequestsWorkload(Workload):
    """The DistServe authors' OPT-13B ShareGPT requests: one run replayed, or all runs' lengths pooled."""

    kind = "distserve_requests"
    config_cls = DistServeRequestsConfig

    def __init__(self, cfg: DistServeRequestsConfig, data_dir: Optional[str] = None) -> None:
        super().__init__(cfg, data_dir)
        self.cfg: DistServeRequestsConfig = cfg
        self.path = resolve_trace_path(cfg.file, data_dir, allow_dir=True)

    def _load(self) -> LoadedRequests:
        loaded = load_distserve_requests(self.path, self.cfg.block_size, self.cfg.sample_seed)
        if not loaded.timed and self.cfg.arrival.kind == "trace":
            raise TraceFormatError(str(self.path), 1, "workload.arrival.kind",
                                   "'trace' replays one run's file; a folder pools lengths without arrivals: use "
                                   "poisson or gamma (e.g. workload.arrival.kind=poisson workload.arrival.rate_rps=2)")
        return loaded
