"""What each prefill instance holds in its own KV cache, learnt from vLLM's KV-cache events.

Each prefill instance runs with ``--kv-events-config`` publishing over ZMQ to ``tcp://127.0.0.1:<port>``
with its instance name as the topic (:func:`kv_events_config`); vLLM's publisher *connects* to a
non-wildcard endpoint, so the router *binds* one SUB socket there and every instance connects to it.
``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`` keeps the block hashes as vLLM's full sha256 bytes, the same
values :class:`systems.router.pool_index.VllmBlockHasher` computes from a prompt, so
:meth:`KVEventIndex.prefix_blocks` answers "how many leading blocks of this prompt does instance X hold".

Events: ``BlockStored`` adds hashes, ``BlockRemoved`` removes them, ``AllBlocksCleared`` empties the
instance (a prefix-cache reset). A background thread receives and decodes; lookups take a lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any, Optional

logger = logging.getLogger(__name__)

INT_HASHES_ENV = "VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES"


def kv_events_config(port: int, topic: str) -> dict[str, Any]:
    """vLLM's ``--kv-events-config`` for a publisher that connects to the router on 127.0.0.1:``port``."""
    return {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://127.0.0.1:{port}",
            "topic": topic}


class KVEventIndex:
    """Block hashes each instance holds, kept up to date from the instances' KV-cache events."""

    def __init__(self, names: Sequence[str]) -> None:
        self._blocks: dict[str, set[bytes]] = {n: set() for n in names}
        self._lock = threading.Lock()
        self.events = 0
        self.decode_errors = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def apply(self, topic: str, batch: Any) -> None:
        """Apply one decoded ``KVEventBatch`` published under ``topic`` (the instance name)."""
        blocks = self._blocks.get(topic)
        if blocks is None:
            return
        with self._lock:
            for event in batch.events:
                kind = type(event).__name__
                if kind == "BlockStored":
                    blocks.update(_as_bytes(h) for h in event.block_hashes)
                elif kind == "BlockRemoved":
                    blocks.difference_update(_as_bytes(h) for h in event.block_hashes)
                elif kind == "AllBlocksCleared":
                    blocks.clear()
                self.events += 1

    def prefix_blocks(self, name: str, hashes: Sequence[bytes]) -> int:
        """Leading ``hashes`` (vLLM block hashes of a prompt) that instance ``name`` holds."""
        with self._lock:
            blocks = self._blocks.get(name, set())
            n = 0
            for h in hashes:
                if h not in blocks:
                    break
                n += 1
            return n

    def start(self, port: int) -> None:
        """Bind the SUB socket on 127.0.0.1:``port`` and receive in a daemon thread."""
        import msgspec
        import zmq
        from vllm.distributed.kv_events import KVEventBatch

        ctx = zmq.Context.instance()
        sock = ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.bind(f"tcp://127.0.0.1:{port}")
        decoder = msgspec.msgpack.Decoder(type=KVEventBatch)

        def run() -> None:
            poller = zmq.Poller()
            poller.register(sock, zmq.POLLIN)
            try:
                while not self._stop.is_set():
                    if not dict(poller.poll(200)):
                        continue
                    topic, _seq, payload = sock.recv_multipart()
                    try:
                        self.apply(topic.decode(), decoder.decode(payload))
                    except (msgspec.DecodeError, ValueError) as exc:
                        self.decode_errors += 1
                        logger.warning("undecodable KV event from %r: %s", topic, exc)
            finally:
                sock.close(linger=0)

        self._thread = threading.Thread(target=run, name="kv-events", daemon=True)
        self._thread.start()
        logger.info("KV-cache events from %s on tcp://127.0.0.1:%d", ", ".join(self._blocks), port)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)


def _as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else int(value).to_bytes(8, "big")
