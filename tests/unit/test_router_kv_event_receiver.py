"""The KV-event receiver keeps going through bad messages, notices lost batches and publisher restarts,
bounds each instance's index, and reports all of it in the disaggregating router's ``/stats``.

The ZMQ test sends real messages to the receiver's socket on 127.0.0.1 in vLLM's wire format
``(topic, 8-byte big-endian seq, msgpack KVEventBatch)`` and always stops the receiver and the socket.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from systems.router.kv_events import KVEventIndex, RateLimitedWarning


@dataclass
class BlockStored:
    block_hashes: list


@dataclass
class BlockRemoved:
    block_hashes: list


@dataclass
class Batch:
    events: list = field(default_factory=list)


H = [bytes([i]) * 32 for i in range(8)]


def frames(topic: str, seq: int, batch: Any) -> list[bytes]:
    return [topic.encode(), seq.to_bytes(8, "big"), batch]


def identity(payload: Any) -> Any:  # the tests below hand over decoded batches as "payloads"
    if not isinstance(payload, Batch):
        raise ValueError("not a batch")
    return payload


def test_bad_messages_are_counted_and_the_next_one_applies() -> None:
    index = KVEventIndex(["p0"])
    assert index.receive([b"p0"], identity) is False  # wrong frame count
    assert index.receive([b"p0", b"\x00", Batch()], identity) is False  # sequence frame not 8 bytes
    assert index.receive([b"\xff\xfe", b"\x00" * 8, Batch()], identity) is False  # topic not UTF-8
    assert index.receive(frames("p0", 0, Batch([BlockStored([H[0], H[1]])])), identity) is True
    assert index.prefix_blocks("p0", H) == 2
    stats = index.receiver_stats()
    assert stats["bad_messages"] == 3 and stats["messages"] == 4 and stats["gaps"] == 0
    assert stats["instances"]["p0"] == {"blocks": 2, "next_seq": 1, "resyncs": 0}


def test_an_undecodable_batch_is_a_lost_batch_the_instance_is_resynced() -> None:
    index = KVEventIndex(["p0", "p1"])
    index.receive(frames("p0", 0, Batch([BlockStored([H[0]])])), identity)
    index.receive(frames("p1", 0, Batch([BlockStored([H[0]])])), identity)
    assert index.receive(frames("p0", 1, b"garbage"), identity) is False
    assert index.prefix_blocks("p0", H) == 0 and index.prefix_blocks("p1", H) == 1  # only p0 dropped
    index.receive(frames("p0", 2, Batch([BlockStored([H[0]])])), identity)  # in sequence again: no gap
    assert index.prefix_blocks("p0", H) == 1
    stats = index.receiver_stats()
    assert stats["bad_messages"] == 1 and stats["gaps"] == 0 and stats["instances"]["p0"]["resyncs"] == 1


def test_a_sequence_gap_is_counted_and_clears_only_that_instance() -> None:
    index = KVEventIndex(["p0", "p1"])
    index.receive(frames("p0", 0, Batch([BlockStored([H[0], H[1]])])), identity)
    index.receive(frames("p1", 0, Batch([BlockStored([H[0]])])), identity)
    index.receive(frames("p0", 4, Batch([BlockStored([H[5]])])), identity)  # batches 1..3 lost
    assert index.prefix_blocks("p0", H) == 0 and index.prefix_blocks("p0", [H[5]]) == 1
    assert index.prefix_blocks("p1", H) == 1
    stats = index.receiver_stats()
    assert stats["gaps"] == 1 and stats["missed_batches"] == 3 and stats["publisher_restarts"] == 0
    assert stats["instances"]["p0"]["resyncs"] == 1 and stats["instances"]["p1"]["resyncs"] == 0
    index.receive(frames("p0", 0, Batch([BlockStored([H[2]])])), identity)  # a new engine process
    assert index.prefix_blocks("p0", [H[5]]) == 0 and index.prefix_blocks("p0", [H[2]]) == 1
    assert index.receiver_stats()["publisher_restarts"] == 1


def test_first_batch_after_a_late_start_counts_as_a_gap() -> None:
    index = KVEventIndex(["p0"])
    index.receive(frames("p0", 7, Batch([BlockStored([H[0]])])), identity)
    assert index.gaps == 1 and index.missed_batches == 7 and index.prefix_blocks("p0", H) == 1


def test_unknown_topics_are_ignored_and_counted() -> None:
    index = KVEventIndex(["p0"])
    assert index.receive(frames("other", 0, Batch([BlockStored([H[0]])])), identity) is False
    assert index.unknown_topic == 1 and index.bad_messages == 0


def test_index_is_bounded_lru_per_instance_and_honours_removals() -> None:
    index = KVEventIndex(["p0", "p1"], capacity_blocks=3)
    index.apply("p0", Batch([BlockStored([H[0], H[1], H[2]])]))
    index.apply("p1", Batch([BlockStored([H[0]])]))
    index.apply("p0", Batch([BlockStored([H[4], H[5]])]))  # two over capacity: the oldest go
    assert index.blocks_held("p0") == 3 and index.evicted == 2
    assert index.prefix_blocks("p0", [H[4], H[5]]) == 2
    assert index.prefix_blocks("p0", H[:3]) == 1  # the chain's tail went first; its head is kept longest
    assert index.blocks_held("p1") == 1  # another instance's room is its own
    index.apply("p0", Batch([BlockRemoved([H[4], H[7]])]))  # removing an unknown hash is harmless
    assert index.prefix_blocks("p0", [H[4], H[5]]) == 0 and index.blocks_held("p0") == 2
    with pytest.raises(ValueError, match="capacity_blocks"):
        KVEventIndex(["p0"], capacity_blocks=0)


def test_warnings_are_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.ratelimit")
    warn = RateLimitedWarning(log, interval_s=3600.0)
    with caplog.at_level(logging.WARNING, logger="test.ratelimit"):
        for k in range(5):
            warn.warn("bad %d", k)
    assert [r.getMessage() for r in caplog.records] == ["bad 0"] and warn.suppressed == 4
    warn.interval_s = 0.0
    with caplog.at_level(logging.WARNING, logger="test.ratelimit"):
        warn.warn("bad %d", 5)
    assert caplog.records[-1].getMessage() == "bad 5 (4 similar messages suppressed)"


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm (vLLM's KVEventBatch decoder)")
@pytest.mark.integration
def test_receiver_survives_garbage_over_zmq_and_reports_in_stats() -> None:
    import msgspec
    import zmq
    from aiohttp.test_utils import TestClient, TestServer
    from vllm.distributed.kv_events import BlockStored as VllmBlockStored
    from vllm.distributed.kv_events import KVEventBatch

    from systems.launch.ports import free_port
    from systems.router.pd_app import Instance, PDRouter, RouterConfig, create_app

    def stored(*hashes: bytes) -> bytes:
        event = VllmBlockStored(block_hashes=list(hashes), parent_block_hash=None, token_ids=list(range(4)),
                                block_size=4, lora_id=None, medium="GPU", lora_name=None)
        return msgspec.msgpack.encode(KVEventBatch(ts=time.time(), events=[event]))

    def wait_for(cond: Any) -> None:
        deadline = time.monotonic() + 30  # a hang guard, not a speed requirement
        while not cond():
            assert time.monotonic() < deadline, "the receiver did not get the messages"
            time.sleep(0.01)

    port = free_port()
    index = KVEventIndex(["p0"])
    index.start(port)
    pub = zmq.Context.instance().socket(zmq.PUB)
    try:
        pub.connect(f"tcp://127.0.0.1:{port}")
        while index.unknown_topic == 0:  # PUB drops messages until the subscription has arrived
            pub.send_multipart([b"warm-up", (0).to_bytes(8, "big"), b""])
            time.sleep(0.05)
        pub.send_multipart([b"p0", (0).to_bytes(8, "big"), b"\xc1 this is not msgpack"])
        pub.send_multipart([b"p0", b"short"])
        pub.send_multipart([b"p0", (1).to_bytes(8, "big"), stored(H[0], H[1])])
        wait_for(lambda: index.prefix_blocks("p0", H) == 2)
        pub.send_multipart([b"p0", (5).to_bytes(8, "big"), stored(H[3])])  # batches 2..4 never sent
        wait_for(lambda: index.gaps == 1)
        assert index.prefix_blocks("p0", [H[3]]) == 1 and index.prefix_blocks("p0", H) == 0

        cfg = RouterConfig(prefill=[Instance("p0", "http://127.0.0.1:1")], decode=[Instance("d0", "http://127.0.0.1:2")],
                           health_interval_s=60.0)

        async def get_stats() -> dict[str, Any]:
            client = TestClient(TestServer(create_app(PDRouter(cfg, events=index)), host="127.0.0.1"))
            await client.start_server()
            try:
                resp = await client.get("/stats")
                assert resp.status == 200
                return await resp.json()
            finally:
                await client.close()

        stats = asyncio.run(asyncio.wait_for(get_stats(), 30))
        receiver = stats["kv_event_receiver"]
        assert receiver["alive"] is True and receiver["error"] is None
        assert receiver["bad_messages"] == 2 and receiver["gaps"] == 1 and receiver["missed_batches"] == 3
        assert receiver["messages"] == receiver["unknown_topic"] + 4
        assert receiver["last_message_age_s"] >= 0 and receiver["last_message_unix"] > 0
        assert receiver["instances"]["p0"] == {"blocks": 1, "next_seq": 6, "resyncs": 2}
        assert stats["kv_events"] == 2 and stats["local_cache_source"] == "kv_events"
    finally:
        pub.close(linger=0)
        index.stop()
    assert not index.receiver_stats()["alive"]
