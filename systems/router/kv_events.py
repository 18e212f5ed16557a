"""What each prefill instance holds in its own KV cache, learnt from vLLM's KV-cache events.

Each prefill instance runs with ``--kv-events-config`` publishing over ZMQ to ``tcp://<router host>:<port>``
(the router's ``--host`` address, 127.0.0.1 by default) with its instance name as the topic
(:func:`kv_events_config`); vLLM's publisher *connects* to a non-wildcard endpoint, so the router *binds*
one SUB socket there and every instance connects to it.
``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`` keeps the block hashes as vLLM's full sha256 bytes, the same
values :class:`systems.router.pool_index.VllmBlockHasher` computes from a prompt, so
:meth:`KVEventIndex.prefix_blocks` answers "how many leading blocks of this prompt does instance X hold".

Wire format (vLLM's ``ZmqEventPublisher``): one ZMQ message per batch, three frames ``(topic, seq,
payload)``; ``seq`` is an 8-byte big-endian counter that starts at 0 when the publisher (the engine
process) starts and grows by one per batch; ``payload`` is a msgpack ``KVEventBatch``.

Events: ``BlockStored`` adds hashes, ``BlockRemoved`` removes them, ``AllBlocksCleared`` empties the
instance (a prefix-cache reset). A background thread receives and decodes; lookups take a lock.

Failure handling (the index must never silently stop updating):

* **Per message.** A message that cannot be used (wrong frame count, a bad sequence frame, a payload that
  does not decode, an event that cannot be applied) is counted in ``bad_messages`` and logged, at most
  once per :data:`LOG_INTERVAL_S` with the number suppressed (gaps and restarts likewise); the thread goes
  on with the next message.
* **Lost batches.** Per instance the index expects ``seq`` = last + 1. A jump forward is a *gap* (the SUB
  socket dropped batches at its high-water mark, or the router started after the engine); a payload
  that does not decode is a lost batch too. Either way the instance's entries are possibly stale (the
  lost batches may have removed blocks), so the index **clears that instance** and rebuilds it from the
  following events (counted in ``gaps``/``missed_batches`` and the instance's ``resyncs``). Clearing
  errs toward "not cached": the router may miss a hit, but it never routes for a hit the engine no
  longer has. vLLM can replay missed batches only when the publisher binds a ``replay_endpoint``; the
  suite's engines connect out to the router and have none, so the index does not ask for replay.
* **Publisher restart.** ``seq`` going backwards means a new engine process (its cache starts empty):
  the instance is cleared and counted in ``publisher_restarts``.
* **Bounded memory.** Each instance holds at most ``capacity_blocks`` hashes (the engine's KV capacity in
  blocks: it cannot hold more). A store beyond it evicts the least recently *stored* block (counted in
  ``evicted``; a non-zero count means removals were missed or the capacity is set too small).

:meth:`KVEventIndex.receiver_stats` reports the thread's liveness and these counters (the router's
``/stats``, key ``kv_event_receiver``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Optional

from systems.launch.ports import LOOPBACK, check_host

logger = logging.getLogger(__name__)

INT_HASHES_ENV = "VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES"
DEFAULT_CAPACITY_BLOCKS = 1 << 16  # per instance, when nothing better is known (about 10 MB of index)
LOG_INTERVAL_S = 10.0  # at most one warning about bad messages per interval


def kv_events_config(port: int, topic: str, host: str = LOOPBACK) -> dict[str, Any]:
    """vLLM's ``--kv-events-config`` for a publisher that connects to the router on ``host:port`` (``host``:
    the address the router binds, i.e. its ``--host``; 127.0.0.1 by default)."""
    return {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": zmq_endpoint(host, port),
            "topic": topic}


def zmq_endpoint(host: str, port: int) -> str:
    """``tcp://host:port`` (an IPv6 address in brackets); ``ValueError`` for a host that is not one."""
    check_host(host, "KV-cache events host")
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


class RateLimitedWarning:
    """``logger.warning`` at most once per ``interval_s``; the next one says how many were suppressed."""

    def __init__(self, log: logging.Logger, interval_s: float = LOG_INTERVAL_S) -> None:
        self._log = log
        self.interval_s = interval_s
        self._last: Optional[float] = None
        self.suppressed = 0

    def warn(self, message: str, *args: Any) -> None:
        now = time.monotonic()
        if self._last is not None and now - self._last < self.interval_s:
            self.suppressed += 1
            return
        if self.suppressed:
            message += " (%d similar messages suppressed)"
            args = (*args, self.suppressed)
        self._log.warning(message, *args)
        self._last = now
        self.suppressed = 0


class _Instance:
    __slots__ = ("blocks", "next_seq", "resyncs")

    def __init__(self) -> None:
        self.blocks: OrderedDict[bytes, None] = OrderedDict()
        self.next_seq: Optional[int] = None  # the sequence number expected next; None before the first batch
        self.resyncs = 0  # times the entries were dropped as possibly stale (gap, lost batch, restart)


class KVEventIndex:
    """Block hashes each instance holds, kept up to date from the instances' KV-cache events."""

    def __init__(self, names: Sequence[str], capacity_blocks: int = DEFAULT_CAPACITY_BLOCKS) -> None:
        if capacity_blocks <= 0:
            raise ValueError(f"KV-event index: capacity_blocks must be positive, got {capacity_blocks}")
        self.capacity_blocks = capacity_blocks
        self._instances: dict[str, _Instance] = {n: _Instance() for n in names}
        self._lock = threading.Lock()
        self.events = 0
        self.messages = 0
        self.bad_messages = 0
        self.unknown_topic = 0
        self.gaps = 0
        self.missed_batches = 0
        self.publisher_restarts = 0
        self.evicted = 0
        self.last_message_unix: Optional[float] = None
        self.thread_error: Optional[str] = None
        self._last_message_mono: Optional[float] = None
        self._warn = RateLimitedWarning(logger)  # bad messages
        self._warn_seq = RateLimitedWarning(logger)  # gaps and restarts
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @property
    def decode_errors(self) -> int:
        """Former name of ``bad_messages``."""
        return self.bad_messages

    # -- index ---------------------------------------------------------------------------------------

    def apply(self, topic: str, batch: Any) -> None:
        """Apply one decoded ``KVEventBatch`` published under ``topic`` (the instance name)."""
        inst = self._instances.get(topic)
        if inst is None:
            return
        with self._lock:
            blocks = inst.blocks
            for event in batch.events:
                kind = type(event).__name__
                if kind == "BlockStored":
                    # the first block of the event most recent, as in BlockLRU: a chain is evicted tail first
                    for h in reversed([_as_bytes(h) for h in event.block_hashes]):
                        blocks[h] = None
                        blocks.move_to_end(h)
                    while len(blocks) > self.capacity_blocks:
                        blocks.popitem(last=False)
                        self.evicted += 1
                elif kind == "BlockRemoved":
                    for h in event.block_hashes:
                        blocks.pop(_as_bytes(h), None)
                elif kind == "AllBlocksCleared":
                    blocks.clear()
                self.events += 1

    def prefix_blocks(self, name: str, hashes: Sequence[bytes]) -> int:
        """Leading ``hashes`` (vLLM block hashes of a prompt) that instance ``name`` holds."""
        with self._lock:
            inst = self._instances.get(name)
            if inst is None:
                return 0
            blocks = inst.blocks
            n = 0
            for h in hashes:
                if h not in blocks:
                    break
                n += 1
            return n

    def blocks_held(self, name: str) -> int:
        """How many block hashes the index holds for instance ``name``."""
        with self._lock:
            inst = self._instances.get(name)
            return len(inst.blocks) if inst is not None else 0

    def _resync(self, inst: _Instance) -> None:
        with self._lock:
            inst.blocks.clear()
        inst.resyncs += 1

    # -- messages ------------------------------------------------------------------------------------

    def receive(self, frames: Sequence[bytes], decode: Callable[[bytes], Any]) -> bool:
        """Handle one ZMQ message ``(topic, seq, payload)``; never raises. True when it was applied."""
        self.messages += 1
        self.last_message_unix = time.time()
        self._last_message_mono = time.monotonic()
        try:
            return self._receive(frames, decode)
        except Exception as exc:  # one bad message must not stop the index
            self.bad_messages += 1
            self._warn.warn("KV-event message %d could not be used: %s: %s", self.messages, type(exc).__name__, exc)
            return False

    def _receive(self, frames: Sequence[bytes], decode: Callable[[bytes], Any]) -> bool:
        if len(frames) != 3:
            raise ValueError(f"expected 3 frames (topic, seq, payload), got {len(frames)}")
        topic_raw, seq_raw, payload = frames
        topic = bytes(topic_raw).decode("utf-8")
        if len(seq_raw) != 8:
            raise ValueError(f"sequence frame of {len(seq_raw)} bytes from {topic!r}, expected 8")
        seq = int.from_bytes(seq_raw, "big")
        inst = self._instances.get(topic)
        if inst is None:
            self.unknown_topic += 1
            return False
        self._check_sequence(topic, inst, seq)
        inst.next_seq = seq + 1
        try:
            batch = decode(payload)
            self.apply(topic, batch)
        except Exception:
            self._resync(inst)  # the batch is lost: the instance's entries may be stale
            raise
        return True

    def _check_sequence(self, topic: str, inst: _Instance, seq: int) -> None:
        expected = 0 if inst.next_seq is None else inst.next_seq
        if seq == expected:
            return
        if seq > expected:
            self.gaps += 1
            self.missed_batches += seq - expected
            self._warn_seq.warn("KV events from %s: batches %d..%d missing; its index entries are dropped as "
                                "possibly stale and rebuilt from the next events", topic, expected, seq - 1)
        else:
            self.publisher_restarts += 1
            self._warn_seq.warn("KV events from %s: sequence went back from %d to %d (a new engine process); "
                                "its index entries are dropped", topic, expected - 1, seq)
        self._resync(inst)

    # -- receiver thread -----------------------------------------------------------------------------

    def start(self, port: int, decode: Optional[Callable[[bytes], Any]] = None, host: str = LOOPBACK) -> None:
        """Bind the SUB socket on ``host:port`` (the router's address; 127.0.0.1 by default) and receive in
        a daemon thread.

        ``decode`` turns a payload into a batch (default: msgspec with vLLM's ``KVEventBatch``).
        """
        import zmq

        endpoint = zmq_endpoint(host, port)
        if decode is None:
            import msgspec
            from vllm.distributed.kv_events import KVEventBatch

            decode = msgspec.msgpack.Decoder(type=KVEventBatch).decode

        ctx = zmq.Context.instance()
        sock = ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        if ":" in host:
            sock.setsockopt(zmq.IPV6, 1)
        sock.bind(endpoint)
        decoder = decode

        def run() -> None:
            poller = zmq.Poller()
            poller.register(sock, zmq.POLLIN)
            try:
                while not self._stop.is_set():
                    if not dict(poller.poll(200)):
                        continue
                    self.receive(sock.recv_multipart(), decoder)
            except Exception as exc:  # the socket itself failed: say so in the stats and the log
                self.thread_error = f"{type(exc).__name__}: {exc}"
                logger.exception("KV-event receiver stopped; the index no longer updates")
            finally:
                sock.close(linger=0)

        self._thread = threading.Thread(target=run, name="kv-events", daemon=True)
        self._thread.start()
        logger.info("KV-cache events from %s on %s", ", ".join(self._instances), endpoint)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def receiver_stats(self) -> dict[str, Any]:
        """Liveness of the receiver thread and the index's counters (JSON-ready)."""
        age = None if self._last_message_mono is None else time.monotonic() - self._last_message_mono
        with self._lock:
            instances = {name: {"blocks": len(i.blocks), "next_seq": i.next_seq, "resyncs": i.resyncs}
                         for name, i in self._instances.items()}
        return {"alive": self._thread is not None and self._thread.is_alive(), "error": self.thread_error,
                "last_message_unix": self.last_message_unix, "last_message_age_s": age,
                "messages": self.messages, "events": self.events, "bad_messages": self.bad_messages,
                "unknown_topic": self.unknown_topic, "gaps": self.gaps, "missed_batches": self.missed_batches,
                "publisher_restarts": self.publisher_restarts, "evicted": self.evicted,
                "capacity_blocks": self.capacity_blocks, "instances": instances}


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, int):
        return value.to_bytes(8, "big", signed=value < 0)
    raise TypeError(f"block hash must be bytes or int, got {type(value).__name__}")
