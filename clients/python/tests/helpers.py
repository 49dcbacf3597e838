"""Helpers of the tests: reading a client's stream with a deadline, and a
TCP proxy that cuts every connection through it at once."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
from typing import Any

import mcpp


async def next_item(client: mcpp.Client, timeout: float = 10.0) -> mcpp.Envelope | mcpp.Reconnected:
    """The client's next item, or a failed test after ``timeout``."""
    return await asyncio.wait_for(anext(aiter(client)), timeout)


async def next_envelope(client: mcpp.Client, timeout: float = 10.0) -> mcpp.Envelope:
    """The client's next item, which must be an envelope."""
    item = await next_item(client, timeout)
    assert isinstance(item, mcpp.Envelope), item
    return item


async def next_of(client: mcpp.Client, kind: str, timeout: float = 10.0) -> mcpp.Envelope:
    """The next envelope of ``kind``, skipping the others (presence, ...)."""
    async with asyncio.timeout(timeout):
        async for item in client:
            if isinstance(item, mcpp.Envelope) and item.kind == kind:
                return item
    raise AssertionError(f"the stream ended before a {kind}")


async def take(client: mcpp.Client, kind: str, n: int, timeout: float = 30.0) -> list[mcpp.Envelope]:
    """The next ``n`` envelopes of ``kind``, in the order they came."""
    out = [await next_of(client, kind, timeout) for _ in range(n)]
    return out


class CuttingProxy:
    """A TCP proxy on a free loopback port in front of a gateway. ``cut()``
    drops every connection through it at once, in both directions, as a
    network that fails would (no close frame); ``hold`` makes it drop new
    connections as soon as they come, as an unreachable gateway would;
    ``muted`` drops what the gateway writes, as a network that stalls one
    way would (what the client writes still gets through). ``upgrades``
    holds the head of each upgrade request passed on (request line and
    headers), in order: what the client presented."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        self._server: asyncio.Server | None = None
        self._links: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.hold = False
        self.muted = False
        self.accepted = 0  # connections passed on to the gateway
        self.upgrades: list[str] = []

    async def start(self) -> CuttingProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"ws://127.0.0.1:{port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.hold:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        self.accepted += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.transport.abort()
            up_writer.transport.abort()
            return
        self.upgrades.append(head.decode("latin-1").rstrip("\r\n"))
        up_writer.write(head)
        link = (writer, up_writer)
        self._links.add(link)
        for src, dst, down in ((reader, up_writer, False), (up_reader, writer, True)):
            task = asyncio.create_task(self._pipe(src, dst, link, down))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, link: tuple[asyncio.StreamWriter, asyncio.StreamWriter], down: bool
    ) -> None:
        try:
            while data := await src.read(65536):
                if down and self.muted:
                    continue
                dst.write(data)
                await dst.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._drop(link)

    def _drop(self, link: tuple[asyncio.StreamWriter, asyncio.StreamWriter]) -> None:
        if link in self._links:
            self._links.discard(link)
            for w in link:
                w.transport.abort()

    def cut(self) -> int:
        """Drops every connection now; returns how many there were."""
        links = list(self._links)
        for link in links:
            self._drop(link)
        return len(links)

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def sign_hs256(secret: str, claims: dict[str, Any]) -> str:
    """A JWT signed with HS256 by ``secret`` (RFC 7519, compact form,
    written by hand: header and claims in base64url JSON, then the
    HMAC-SHA256 of the two)."""

    def part(b: bytes) -> str:
        return base64.urlsafe_b64encode(b).rstrip(b"=").decode()

    signed = part(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()) + "." + part(json.dumps(claims).encode())
    return signed + "." + part(hmac.new(secret.encode(), signed.encode(), hashlib.sha256).digest())
