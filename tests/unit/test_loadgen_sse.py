"""The SSE parser, the HTTP/1.1 response parser and the completion-stream accounting, split at every byte."""

from __future__ import annotations

import json

import pytest

from harness.loadgen.completion_stream import CompletionStream
from harness.loadgen.http1 import HTTPProtocolError, ResponseParser
from harness.loadgen.sse import SSEEvent, SSEParser


def token(text: str, finish: str | None = None) -> str:
    choice = {"index": 0, "text": text, "finish_reason": finish}
    return "data: " + json.dumps({"object": "text_completion", "choices": [choice], "usage": None})


USAGE = "data: " + json.dumps(
    {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}}}
)


def sample_stream(eol: str) -> bytes:
    parts = [
        ": ping", "",
        token(" a"), "",
        token(" b"), "", ": keep-alive", "",
        "event: message", token(" c", "length"), "",
        USAGE, "",
        "data: [DONE]", "",
    ]
    return (eol.join(parts) + eol).encode()


EXPECTED_DATA = [token(" a"), token(" b"), token(" c", "length"), USAGE, "data: [DONE]"]


def feed_pieces(pieces: list[bytes]) -> tuple[list[SSEEvent], int]:
    parser = SSEParser()
    events: list[SSEEvent] = []
    for piece in pieces:
        events += parser.feed(piece)
    events += parser.close()
    return events, parser.n_comments


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
def test_sse_every_split_point(eol: str) -> None:
    raw = sample_stream(eol)
    want = [d[len("data: "):].encode() for d in EXPECTED_DATA]
    for cut in range(len(raw) + 1):
        events, comments = feed_pieces([raw[:cut], raw[cut:]])
        assert [e.data for e in events] == want, f"split at byte {cut}"
        assert all(e.event == "message" for e in events)
        assert comments == 2


@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_sse_byte_by_byte_and_three_way_splits(eol: str) -> None:
    raw = sample_stream(eol)
    want = [d[len("data: "):].encode() for d in EXPECTED_DATA]
    assert [e.data for e in feed_pieces([raw[i : i + 1] for i in range(len(raw))])[0]] == want
    for a in range(0, len(raw), 7):
        for b in range(a, len(raw), 11):
            assert [e.data for e in feed_pieces([raw[:a], raw[a:b], raw[b:]])[0]] == want


def test_sse_fields_multiline_and_event_types() -> None:
    parser = SSEParser()
    events = parser.feed(b"event: error\ndata: line1\ndata:line2\nid: 7\nretry: 10\n\ndata: x")
    assert events == [SSEEvent("error", b"line1\nline2")]
    assert parser.feed(b"\n\n") == [SSEEvent("message", b"x")]
    assert parser.feed(b"\n\n\n") == []  # blank lines without data dispatch nothing
    assert parser.feed(b"data: tail-without-blank-line") == []
    assert parser.close() == [SSEEvent("message", b"tail-without-blank-line")]


def chunked(body: bytes, sizes: list[int]) -> bytes:
    out, pos = b"", 0
    for size in sizes:
        piece = body[pos : pos + size]
        pos += size
        out += b"%x\r\n%s\r\n" % (len(piece), piece)
    return out + b"0\r\n\r\n"


def test_http_chunked_every_split_point() -> None:
    body = sample_stream("\n")
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nX-Instance: p0\r\n\r\n"
    raw = head + chunked(body, [7, 40, 1, 200, 1000])
    for cut in range(len(raw) + 1):
        parser = ResponseParser()
        got = b"".join(parser.feed(raw[:cut]) + parser.feed(raw[cut:]))
        assert parser.complete and got == body, f"split at byte {cut}"
        assert parser.status == 200 and parser.headers["x-instance"] == "p0" and parser.keep_alive


def test_http_content_length_interim_and_close() -> None:
    parser = ResponseParser()
    raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 429 Too Many Requests\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
    assert b"".join(parser.feed(raw)) == b"hello"
    assert parser.complete and parser.status == 429 and not parser.keep_alive
    parser = ResponseParser()
    assert parser.feed(b"HTTP/1.0 200 OK\r\n\r\nabc") == [b"abc"]
    assert parser.reads_until_close and not parser.complete and not parser.keep_alive


@pytest.mark.parametrize("raw", [b"HTTX/1.1 200 OK\r\n\r\n", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                                 b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n"])
def test_http_malformed(raw: bytes) -> None:
    with pytest.raises(HTTPProtocolError):
        ResponseParser().feed(raw)


def run_stream(raw: bytes) -> CompletionStream:
    stream = CompletionStream()
    for i, event in enumerate(feed_pieces([raw])[0]):
        stream.on_event(event, float(i))
    return stream


def test_completion_stream_accounting() -> None:
    stream = run_stream(sample_stream("\n"))
    assert stream.failure() == ""
    assert stream.chunk_times == [0.0, 1.0, 2.0]
    assert stream.finish_reason == "length" and stream.n_out == 3 and stream.cached_tokens == 4
    assert stream.done_s == 4.0


def test_completion_stream_counts_chunks_without_usage_and_empty_text_tokens() -> None:
    raw = "\n\n".join([token(""), token(" b"), token("", "length"), "data: [DONE]"]) + "\n\n"
    stream = run_stream(raw.encode())
    assert stream.failure() == "" and stream.n_out == 2 and stream.cached_tokens == -1


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (token(" a") + "\n\ndata: [DONE]\n\n", "without a finish_reason"),
        ("data: [DONE]\n\n", "no tokens"),
        (token(" a") + "\n\ndata: {not json\n\n", "malformed"),
        (token(" a") + '\n\ndata: {"object":"error","message":"boom"}\n\n', "boom"),
        ('event: error\ndata: overloaded\n\n', "overloaded"),
        (token(" a") + "\n\n" + token("", "abort") + "\n\ndata: [DONE]\n\n", "finish_reason 'abort' after 1 tokens"),
        (token(" a") + "\n\n" + token("", "error") + "\n\ndata: [DONE]\n\n", "finish_reason 'error'"),
    ],
)
def test_completion_stream_failures(raw: str, why: str) -> None:
    assert why in run_stream(raw.encode()).failure()


@pytest.mark.parametrize(
    "obj",
    [
        {"choices": [{"index": 0, "text": " a", "finish_reason": None}], "usage": None},
        {"choices": [{"index": 0, "text": "", "finish_reason": None}]},
        {"choices": [{"index": 0, "text": '"finish_reason":"length"', "finish_reason": None}], "usage": None},
        {"choices": [{"index": 0, "text": '"finish_reason":null', "finish_reason": "length"}], "usage": None},
        {"choices": [{"index": 0, "text": "x", "finish_reason": None}],
         "usage": {"completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 3}}},
        {"choices": [{"index": 0, "text": "x", "finish_reason": None}, {"index": 1, "text": "", "finish_reason": "stop"}]},
        {"choices": [], "usage": {"completion_tokens": 2}},
    ],
)
def test_fast_path_agrees_with_full_decoding(obj: dict) -> None:
    compact = json.dumps(obj, separators=(",", ":")).encode()  # fast path candidate
    spaced = json.dumps(obj).encode()  # never takes the fast path
    results = []
    for data in (compact, spaced):
        stream = CompletionStream()
        stream.on_event(SSEEvent("message", data), 1.0)
        results.append((stream.chunk_times, stream.finish_reason, stream.n_out, stream.cached_tokens, stream.error))
    assert results[0] == results[1]
