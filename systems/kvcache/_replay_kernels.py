"""Numba kernels behind :mod:`systems.kvcache.prefix_cache_replay`.

Every policy is one ordering of the cached blocks by ``(bucket key, time of last access)``; the victim is
the smallest. The bucket key of a block with access count ``c`` last accessed at position ``p`` is

* LRU: 0 (pure recency);
* LFU: ``c - 1``;
* LengthAware: ``(c - 1) * m + (m - 1 - p)`` with ``m`` > every position (lowest count, then largest
  position).

Time is a clock that advances by one per block access, and access number ``e`` owns entry ``e`` of a pool
of ``n_accesses`` entries (``ent_block[e]``, ``ent_next[e]``). An access appends its entry to the tail of
its bucket's singly linked queue, so every queue is in time order. Entries are never unlinked: entry ``e``
of block ``b`` is *live* iff ``last[b] == e`` (``b`` is cached and ``e`` is its latest access), and stale
entries are skipped when they reach the head of the queue. The victim is the first live entry of the
lowest bucket holding a live entry, so touch, insert and evict are O(1) amortised, apart from finding the
lowest bucket: ``bk[k, 2]`` counts the live blocks of bucket ``k``, ``gcnt`` counts them per group of 64
buckets, and ``lo`` is a lower bound on the lowest one, so the scan is short. A bucket whose live count
drops to 0 forgets its queue.

Keys ``>= n_buckets`` (blocks accessed very often under LengthAware or LFU) live in an indexed binary
min-heap on ``(key, last)`` instead; a touch only ever raises a key, and every overflow key is larger than
every dense key, so the heap only supplies victims when no dense bucket has a live block.

State of one cache: ``rows[U, 4]`` (per block: last access or -1, count, key, heap slot or -1),
``bk[K, 3]`` (queue head, queue tail, live count per bucket), ``gcnt``, ``heap`` and ``sc`` (size, lo,
heap size). The entry pool and the clock are shared by all caches of one replay. No global state, no
logging: the Python wrapper validates the inputs.
"""

from __future__ import annotations

import numpy as np
from numba import njit

POLICY_LRU = 0
POLICY_LFU = 1
POLICY_LENGTH_AWARE = 2

# fields of rows[b, :]
_LAST = 0
_CNT = 1
_KEY = 2
_HPOS = 3
N_FIELDS = 4

# fields of bk[k, :]
_HEAD = 0
_TAIL = 1
_LIVE = 2

# scalars in sc[:]
_SIZE = 0
_LO = 1
_HSIZE = 2
N_SCALARS = 3

_GROUP_SHIFT = 6


@njit(cache=True, inline="always")
def _bucket_key(policy, count, position, m):
    if policy == POLICY_LRU:
        return 0
    if policy == POLICY_LFU:
        return count - 1
    return (count - 1) * m + (m - 1 - position)


@njit(cache=True, inline="always")
def _heap_less(rows, a, b):
    ka = rows[a, _KEY]
    kb = rows[b, _KEY]
    return ka < kb or (ka == kb and rows[a, _LAST] < rows[b, _LAST])


@njit(cache=True)
def _sift_up(heap, rows, i):
    b = heap[i]
    while i > 0:
        p = (i - 1) >> 1
        q = heap[p]
        if _heap_less(rows, b, q):
            heap[i] = q
            rows[q, _HPOS] = i
            i = p
        else:
            break
    heap[i] = b
    rows[b, _HPOS] = i


@njit(cache=True)
def _sift_down(heap, rows, i, size):
    b = heap[i]
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        cb = heap[c]
        if c + 1 < size and _heap_less(rows, heap[c + 1], cb):
            c += 1
            cb = heap[c]
        if _heap_less(rows, cb, b):
            heap[i] = cb
            rows[cb, _HPOS] = i
            i = c
        else:
            break
    heap[i] = b
    rows[b, _HPOS] = i


@njit(cache=True, inline="always")
def _lowest_bucket(bk, gcnt, lo, n_buckets):
    """Lowest bucket >= lo with a live block; one must exist."""
    g = lo >> _GROUP_SHIFT
    if gcnt[g] > 0:
        end = min((g + 1) << _GROUP_SHIFT, n_buckets)
        for k in range(lo, end):
            if bk[k, _LIVE] > 0:
                return k
    g += 1
    while gcnt[g] == 0:
        g += 1
    k = g << _GROUP_SHIFT
    while bk[k, _LIVE] == 0:
        k += 1
    return k


@njit(cache=True)
def _heap_pop(heap, rows, sc):
    v = heap[0]
    last = sc[_HSIZE] - 1
    sc[_HSIZE] = last
    if last > 0:
        heap[0] = heap[last]
        _sift_down(heap, rows, 0, last)
    rows[v, _HPOS] = -1
    return v


@njit(cache=True)
def _heap_push(heap, rows, sc, b):
    i = sc[_HSIZE]
    heap[i] = b
    sc[_HSIZE] = i + 1
    _sift_up(heap, rows, i)


@njit(cache=True, inline="always")
def _prefix_len(dense_ids, lo, hi, rows):
    k = 0
    while lo + k < hi and rows[dense_ids[lo + k], _LAST] >= 0:
        k += 1
    return k


@njit(cache=True, inline="always")
def _access_request(
    dense_ids, lo, hi, capacity, policy, m, n_buckets, rows, bk, gcnt, heap, sc, ent_block, ent_next, e
):
    """Access blocks ``dense_ids[lo:hi]`` in order (touch, or insert after evicting when full), the first
    at clock ``e``; returns the clock after the last.

    The common path is written out in this one loop and the function is inlined into its callers: a call
    to a non-inlined numba function taking arrays pays reference counting on each array (measured here:
    ~100 ns per call, several times the work of one access). Only rare paths (overflow heap) are calls."""
    for j in range(hi - lo):
        b = dense_ids[lo + j]
        if rows[b, _LAST] >= 0:  # touch
            c = rows[b, _CNT] + 1
            if rows[b, _HPOS] >= 0:  # in the overflow heap: the key only grows, sift down
                rows[b, _CNT] = c
                rows[b, _LAST] = e
                rows[b, _KEY] = _bucket_key(policy, c, j, m)
                _sift_down(heap, rows, rows[b, _HPOS], sc[_HSIZE])
                e += 1
                continue
            old = rows[b, _KEY]  # leave the old bucket; its queue entry turns stale
            live = bk[old, _LIVE] - 1
            bk[old, _LIVE] = live
            gcnt[old >> _GROUP_SHIFT] -= 1
            if live == 0:
                bk[old, _HEAD] = -1
                bk[old, _TAIL] = -1
        else:  # insert
            c = 1
            if sc[_SIZE] >= capacity:  # evict first
                if sc[_SIZE] > sc[_HSIZE]:
                    k = sc[_LO]
                    if bk[k, _LIVE] == 0:
                        k = _lowest_bucket(bk, gcnt, k, n_buckets)
                        sc[_LO] = k
                    x = bk[k, _HEAD]
                    v = ent_block[x]
                    while rows[v, _LAST] != x:  # skip stale entries
                        x = ent_next[x]
                        v = ent_block[x]
                    nxt = ent_next[x]
                    bk[k, _HEAD] = nxt
                    live = bk[k, _LIVE] - 1
                    bk[k, _LIVE] = live
                    gcnt[k >> _GROUP_SHIFT] -= 1
                    if nxt < 0 or live == 0:
                        bk[k, _HEAD] = -1
                        bk[k, _TAIL] = -1
                else:
                    v = _heap_pop(heap, rows, sc)
                rows[v, _LAST] = -1
                rows[v, _CNT] = 0
                sc[_SIZE] -= 1
            sc[_SIZE] += 1
        k = _bucket_key(policy, c, j, m)
        rows[b, _CNT] = c
        rows[b, _LAST] = e
        rows[b, _KEY] = k
        if k < n_buckets:  # append entry e to bucket k's queue
            ent_block[e] = b
            ent_next[e] = -1
            t = bk[k, _TAIL]
            if t >= 0:
                ent_next[t] = e
            else:
                bk[k, _HEAD] = e
            bk[k, _TAIL] = e
            bk[k, _LIVE] += 1
            gcnt[k >> _GROUP_SHIFT] += 1
            if k < sc[_LO]:
                sc[_LO] = k
        else:
            _heap_push(heap, rows, sc, b)
        e += 1
    return e


@njit(cache=True)
def _new_caches(n_caches, n_unique, capacity, n_buckets):
    rows = np.empty((n_caches, n_unique, N_FIELDS), dtype=np.int64)
    rows[:, :, _LAST] = -1
    rows[:, :, _CNT] = 0
    rows[:, :, _KEY] = 0
    rows[:, :, _HPOS] = -1
    bk = np.full((n_caches, n_buckets, 3), -1, dtype=np.int64)
    bk[:, :, _LIVE] = 0
    gcnt = np.zeros((n_caches, (n_buckets >> _GROUP_SHIFT) + 2), dtype=np.int64)
    heap = np.empty((n_caches, capacity), dtype=np.int64)
    sc = np.zeros((n_caches, N_SCALARS), dtype=np.int64)
    sc[:, _LO] = n_buckets
    return rows, bk, gcnt, heap, sc


@njit(cache=True)
def replay_infinite(dense_ids: np.ndarray, offsets: np.ndarray, n_unique: int) -> np.ndarray:
    """Prefix hits with a cache that never evicts: leading blocks seen in earlier requests."""
    n_req = offsets.shape[0] - 1
    seen = np.zeros(n_unique, dtype=np.bool_)
    hits = np.zeros(n_req, dtype=np.int64)
    for r in range(n_req):
        lo = offsets[r]
        hi = offsets[r + 1]
        k = 0
        while lo + k < hi and seen[dense_ids[lo + k]]:
            k += 1
        hits[r] = k
        for i in range(lo, hi):
            seen[dense_ids[i]] = True
    return hits


@njit(cache=True)
def replay_finite(
    dense_ids: np.ndarray,
    offsets: np.ndarray,
    n_unique: int,
    capacity: int,
    policy: int,
    m: int,
    n_buckets: int,
) -> np.ndarray:
    """Prefix hits per request for one cache of ``capacity`` (>= 1) blocks under ``policy``."""
    n_req = offsets.shape[0] - 1
    rows, bk, gcnt, heap, sc = _new_caches(1, n_unique, capacity, n_buckets)
    ent_block = np.empty(dense_ids.shape[0], dtype=np.int64)
    ent_next = np.empty(dense_ids.shape[0], dtype=np.int64)
    e = 0
    rows0, bk0, gcnt0, heap0, sc0 = rows[0], bk[0], gcnt[0], heap[0], sc[0]
    hits = np.zeros(n_req, dtype=np.int64)
    for r in range(n_req):
        lo = offsets[r]
        hi = offsets[r + 1]
        hits[r] = _prefix_len(dense_ids, lo, hi, rows0)
        e = _access_request(
            dense_ids,
            lo,
            hi,
            capacity,
            policy,
            m,
            n_buckets,
            rows0,
            bk0,
            gcnt0,
            heap0,
            sc0,
            ent_block,
            ent_next,
            e,
        )
    return hits


@njit(cache=True)
def replay_local(
    dense_ids: np.ndarray,
    offsets: np.ndarray,
    n_unique: int,
    n_instances: int,
    capacity: int,
    policy: int,
    m: int,
    n_buckets: int,
    cache_aware: bool,
    preassigned: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """N private caches of ``capacity`` (>= 1) blocks; request r goes to ``preassigned[r]`` or, if
    ``cache_aware``, to the instance with the longest cached prefix (ties: fewest requests routed so far,
    then lowest index). Returns (hits, instance)."""
    n_req = offsets.shape[0] - 1
    rows, bk, gcnt, heap, sc = _new_caches(n_instances, n_unique, capacity, n_buckets)
    ent_block = np.empty(dense_ids.shape[0], dtype=np.int64)
    ent_next = np.empty(dense_ids.shape[0], dtype=np.int64)
    e = 0
    routed = np.zeros(n_instances, dtype=np.int64)
    hits = np.zeros(n_req, dtype=np.int64)
    instance = np.zeros(n_req, dtype=np.int64)
    for r in range(n_req):
        lo = offsets[r]
        hi = offsets[r + 1]
        if cache_aware:
            inst = 0
            best = -1
            for i in range(n_instances):
                k = _prefix_len(dense_ids, lo, hi, rows[i])
                if k > best or (k == best and routed[i] < routed[inst]):
                    inst = i
                    best = k
            hits[r] = best
        else:
            inst = preassigned[r]
            hits[r] = _prefix_len(dense_ids, lo, hi, rows[inst])
        instance[r] = inst
        routed[inst] += 1
        e = _access_request(
            dense_ids,
            lo,
            hi,
            capacity,
            policy,
            m,
            n_buckets,
            rows[inst],
            bk[inst],
            gcnt[inst],
            heap[inst],
            sc[inst],
            ent_block,
            ent_next,
            e,
        )
    return hits, instance
