"""What needs no gateway: the URLs, the filter's query, envelopes as
attributes, and the body of a refusal however it comes (a small HTTP
server stands in for a proxy that answers instead of the gateway)."""

from __future__ import annotations

import asyncio
import urllib.parse

import pytest

import mcpp
from mcpp.connection import base_url, dial_url, filter_query, without_token
from mcpp.publish import publish_url


def test_filter_query() -> None:
    assert filter_query({"main": False, "contexts": "none", "types": ["a", "b"], "ids": "x,y", "exclude_types": [], "echo": None}) == [
        ("main", "0"),
        ("contexts", "none"),
        ("types", "a,b"),
        ("ids", "x,y"),
    ]
    with pytest.raises(ValueError, match="unknown name 'typez'"):
        filter_query({"typez": ["a"]})
    with pytest.raises(ValueError):
        filter_query({"types": [1]})
    with pytest.raises(ValueError):
        filter_query({"echo": 1})


def test_urls() -> None:
    base = base_url("ws://h:1", "lab", "alice", None)
    assert base == "ws://h:1/ws?pod=lab&participant=alice"
    assert base_url("https://h/prefix/ws?token=t", "lab", None, "mcpx/v0.1") == "wss://h/prefix/ws?token=t&pod=lab&protocol=mcpx%2Fv0.1"
    url = dial_url(base, [("types", "a,b")], "e-1", "all", False)
    assert urllib.parse.parse_qs(urllib.parse.urlsplit(url).query) == {
        "pod": ["lab"], "participant": ["alice"], "types": ["a,b"], "resume": ["e-1"], "history": ["all"], "fold": ["0"]
    }
    assert publish_url("ws://h:1/ws", "lab", "ci") == "http://h:1/pods/lab/envelopes?participant=ci"
    # After a refresh the URL's token is dropped; the rest stays.
    assert without_token("wss://h/prefix/ws?token=t&pod=lab&x=1") == "wss://h/prefix/ws?pod=lab&x=1"


def test_close_codes() -> None:
    # The codes that end a participant's stay come as their own errors,
    # all ClosedErrors, and end the client; the others reconnect.
    for code, cls, final in [
        (4000, mcpp.ClosedError, True),
        (4401, mcpp.TokenExpiredError, True),
        (4403, mcpp.RevokedError, True),
        (4410, mcpp.KickedError, True),
        (4503, mcpp.ClosedError, False),
        (4008, mcpp.ClosedError, False),
        (1011, mcpp.ClosedError, False),
    ]:
        err = mcpp.ClosedError.of(code, "why")
        assert type(err) is cls and (err.code, err.reason, err.final) == (code, "why", final)
    assert str(mcpp.ClosedError.of(mcpp.CLOSE_ORDER_LOST)) == "the gateway closed the connection: close 4503 (the gateway node lost the pod's order)"
    assert publish_url("https://h/prefix/", "lab") == "https://h/prefix/pods/lab/envelopes"
    with pytest.raises(ValueError):
        base_url("ws://h:1", "", None, None)
    with pytest.raises(ValueError):
        publish_url("ftp://h", "lab")


def test_envelope_attributes() -> None:
    env = mcpp.Envelope({"kind": "note", "from": "bob", "context": {"id": "r1", "type": "reasoning"}, "lifecycle": {"mode": "ephemeral"}})
    assert (env.kind, env.from_, env.context_id, env.id, env.to) == ("note", "bob", "r1", None, None)
    assert env.lifecycle == {"mode": "ephemeral"} and not env.is_system
    assert mcpp.Envelope({"kind": "system/welcome"}).is_system
    assert repr(env).startswith("Envelope({")


async def answer_with(status: int, headers: list[str], body: bytes) -> tuple[asyncio.AbstractServer, str]:
    """An HTTP server that answers every request with this, as a proxy in
    front of the gateway might."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        head = f"HTTP/1.1 {status} Whatever\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n"
        writer.write(head.encode() + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_a_refusal_in_chunks_still_says_its_code() -> None:
    chunked = b'1a\r\n{"error": "over_capacity",\r\n1c\r\n "message": "pod not ready"}\r\n0\r\n\r\n'
    server, url = await answer_with(503, ["Content-Type: application/json", "Transfer-Encoding: chunked"], chunked)
    try:
        with pytest.raises(mcpp.RefusedError) as refused:
            await mcpp.connect(url, pod="lab")
        assert (refused.value.status, refused.value.code, refused.value.message) == (503, "over_capacity", "pod not ready")
        assert refused.value.temporary
        with pytest.raises(mcpp.RefusedError) as publish_refused:
            await mcpp.publish(url, {"kind": "chat"}, pod="lab", participant="ci")
        assert (publish_refused.value.status, publish_refused.value.code) == (503, "over_capacity")
    finally:
        server.close()


async def test_a_refusal_that_is_not_the_gateways() -> None:
    server, url = await answer_with(404, ["Content-Type: text/plain", "Content-Length: 9"], b"not here\n")
    try:
        with pytest.raises(mcpp.RefusedError) as refused:
            await mcpp.connect(url, pod="lab")
        assert (refused.value.status, refused.value.code, refused.value.message) == (404, None, "not here")
    finally:
        server.close()


async def test_no_gateway_there() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(OSError):
        await mcpp.connect(f"ws://127.0.0.1:{port}", pod="lab")
