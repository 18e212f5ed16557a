"""A finished simulation's records as columns, gathered straight from its requests, and the records
themselves made only when something asks for them.

The harness reads a point's records as columns (``harness.metrics.RecordColumns``: the summary, the
validity checks and ``requests.parquet`` all start from them). Making one ``RequestRecord`` per request
and then reading every field back out of the records costs more than the columns themselves (on the
Azure conversation hour: 19,366 records and 3 million token times). :func:`record_columns` gathers the
records' fields as columns (:class:`~vocab.records.RecordFieldColumns`), value for value what
``harness.metrics.extract_columns`` reads from :meth:`SimRequest.to_record`'s records, from the requests
and the instances' iteration timelines.
:class:`LazyRecords` stands for the records: it knows their number and makes them on first use.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Optional

import numpy as np

from systems.sim.request import SimRequest
from vocab.records import RecordFieldColumns, RequestRecord, RequestStatus

NAN = math.nan
_OK = RequestStatus.OK


def _ints(values: Sequence[Any], attr: str) -> np.ndarray:
    return np.fromiter(map(operator.attrgetter(attr), values), dtype=np.int64, count=len(values))


def _floats(values: Sequence[Any], attr: str) -> np.ndarray:
    return np.fromiter(map(operator.attrgetter(attr), values), dtype=np.float64, count=len(values))


def _token_times(requests: Sequence[SimRequest]) -> tuple[np.ndarray, np.ndarray]:
    """Every request's token times end to end (as :meth:`SimRequest.token_time_list` gives them) and their
    count per request.

    A request's times are its own (the prefill's token) and then stretches of an instance's decode
    iterations, each a slice of that instance's timeline: the slices and the requests' own times are
    joined by one concatenation. A preempted request's times are sorted by
    :meth:`SimRequest.token_time_list` and taken from it whole."""
    own: list[float] = []  # the requests' own times (and preempted requests' whole lists), end to end
    pieces: list[Any] = []  # in order: a slice of an instance's timeline, or (start, count) in ``own``
    timelines: dict[int, np.ndarray] = {}  # id(instance) -> its timeline
    n_chunks = np.zeros(len(requests), dtype=np.int64)
    for i, request in enumerate(requests):
        ranges = request.ranges
        if ranges and request.preemptions:
            whole = request.token_time_list()
            pieces.append((len(own), len(whole)))
            own += whole
            n_chunks[i] = len(whole)
            continue
        n = 0
        if request.token_times:
            mine = [float(t) for t in request.token_times]
            pieces.append((len(own), len(mine)))
            own += mine
            n = len(mine)
        for inst, first, count in ranges:
            timeline = timelines.get(id(inst))
            if timeline is None:
                timeline = timelines[id(inst)] = inst.iteration_timeline()  # type: ignore[attr-defined]
            piece = timeline[first:first + count]
            if len(piece):
                pieces.append(piece)
                n += len(piece)
        n_chunks[i] = n
    if not pieces:
        return np.empty(0, dtype=np.float64), n_chunks
    own_times = np.array(own, dtype=np.float64)
    return np.concatenate([p if isinstance(p, np.ndarray) else own_times[p[0]:p[0] + p[1]] for p in pieces]), \
        n_chunks


def record_columns(requests: Sequence[SimRequest], shift_s: float = 0.0) -> RecordFieldColumns:
    """The columns of the requests' records (:meth:`SimRequest.to_record`), with their arrival and send
    times moved ``shift_s`` earlier when it is positive (a fitted profile's request overhead, which the
    simulated arrivals carry)."""
    specs = [r.spec for r in requests]
    times, n_chunks = _token_times(requests)
    arrival = _floats(specs, "arrival_s")
    if shift_s > 0:
        arrival = arrival - shift_s
    first = _floats(requests, "first_token_s")
    first[n_chunks == 0] = NAN  # a record without tokens has no first token
    status = list(map(operator.attrgetter("status"), requests))
    fields: dict[str, np.ndarray] = {
        "request_id": _ints(specs, "request_id"),
        "status": np.array(list(map(str, status)), dtype=object),
        "arrival_s": arrival,
        "sent_s": arrival.copy(),
        "first_token_s": first,
        "finish_s": _floats(requests, "finish_s"),
        "n_out": n_chunks,
        "output_length": _ints(specs, "output_length"),
        "input_length": _ints(specs, "input_length"),
        "cached_tokens": _ints(requests, "cached_tokens"),
        "instance": np.array(list(map(SimRequest.record_instance, requests)), dtype=object),
        "prefix_group": _ints(specs, "prefix_group"),
        "shared_prefix_len": _ints(specs, "shared_prefix_len"),
        "session_id": _ints(specs, "session_id"),
        "turn": _ints(specs, "turn"),
        "error": np.array(list(map(operator.attrgetter("error"), requests)), dtype=object),
    }
    return RecordFieldColumns(fields, times, n_chunks, _extra(requests, specs, status))


def _extra(requests: Sequence[SimRequest], specs: Sequence[Any], status: list[Any]) -> dict[str, list[Any]]:
    """Each key of the records' ``extra`` (in :meth:`SimRequest.to_record`'s order) and its values, the same
    Python values the records hold (computed key by key over the requests, as ``to_record`` computes them
    request by request: ``tests/unit/test_sim_record_columns.py`` holds the two to the same values and types)."""
    get = operator.attrgetter
    prefill_start = list(map(get("prefill_start_s"), requests))
    finish = list(map(get("finish_s"), requests))
    return {
        "queue_s": [s - a if s == s else NAN for s, a in zip(prefill_start, map(get("arrival_s"), specs), strict=True)],
        "prefill_s": [e - s for e, s in zip(map(get("prefill_end_s"), requests), prefill_start, strict=True)],
        "kv_transfer_s": list(map(get("kv_transfer_s"), requests)),
        "kv_transfer_bytes": list(map(get("kv_transfer_bytes"), requests)),
        "kv_fetch_s": list(map(get("fetch_s"), requests)),
        "kv_fetched_tokens": list(map(float, map(get("fetched_tokens"), requests))),
        "decode_s": [f - d if st == _OK else NAN
                     for f, d, st in zip(finish, map(get("decode_start_s"), requests), status, strict=True)],
        "preemptions": list(map(float, map(get("preemptions"), requests))),
    }


class LazyRecords(Sequence[RequestRecord]):
    """A run's records, made by ``make`` the first time anything but their number is asked for."""

    __slots__ = ("_n", "_make", "_records")

    def __init__(self, n: int, make: Callable[[], tuple[RequestRecord, ...]]) -> None:
        self._n = n
        self._make: Optional[Callable[[], tuple[RequestRecord, ...]]] = make
        self._records: Optional[tuple[RequestRecord, ...]] = None

    def materialize(self) -> tuple[RequestRecord, ...]:
        """The records, as a tuple (made now unless they were already)."""
        if self._records is None:
            assert self._make is not None
            records = self._make()
            if len(records) != self._n:
                raise RuntimeError(f"expected {self._n} records, made {len(records)}")
            self._records, self._make = records, None
        return self._records

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: Any) -> Any:
        return self.materialize()[index]

    def __iter__(self) -> Iterator[RequestRecord]:
        return iter(self.materialize())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyRecords):
            return self.materialize() == other.materialize()
        if isinstance(other, tuple):
            return self.materialize() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return tuple, (self.materialize(),)

    def __repr__(self) -> str:
        state = "made" if self._records is not None else "not made yet"
        return f"LazyRecords({self._n} records, {state})"
