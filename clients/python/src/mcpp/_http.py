"""A small HTTP/1.1 client on asyncio streams: what :func:`mcpp.publish`
sends, and the body of a refused upgrade, which the websockets library of
Debian 12 (10.4) does not read."""

from __future__ import annotations

import asyncio
import ssl
import urllib.parse
from collections.abc import Mapping
from typing import Protocol

__all__ = ["Headers", "read_body", "request"]

_MAX_HEADER_LINE = 64 * 1024
_MAX_HEADERS = 256


class Headers(Protocol):
    """Response headers looked up by a lower-case name: a ``dict`` of
    lower-case names, or websockets' own ``Headers``."""

    def get(self, key: str, /) -> str | None: ...


async def read_body(reader: asyncio.StreamReader, headers: Headers, limit: int) -> bytes:
    """Reads the body that follows a response's headers: by its
    ``Content-Length``, in chunks, or up to the end of the connection. It
    reads at most ``limit`` bytes and one more, so a caller can tell an
    answer over the limit (``len(body) > limit``)."""
    if (headers.get("transfer-encoding") or "").lower().strip().endswith("chunked"):
        return await _read_chunked(reader, limit)
    length = headers.get("content-length")
    if length is not None:
        try:
            n = int(length)
        except ValueError:
            raise ValueError(f"a Content-Length that is not a number: {length!r}") from None
        if n > limit:
            return await reader.readexactly(limit + 1)
        return await reader.readexactly(n)
    return await reader.read(limit + 1)


async def _read_chunked(reader: asyncio.StreamReader, limit: int) -> bytes:
    body = bytearray()
    while True:
        line = await reader.readuntil(b"\r\n")
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            # The trailer, up to the blank line that ends the message.
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass
            return bytes(body)
        if len(body) + size > limit:
            body += await reader.readexactly(limit + 1 - len(body))
            return bytes(body)
        body += await reader.readexactly(size)
        await reader.readexactly(2)  # the chunk's CRLF


async def request(
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    limit: int,
    ssl_context: ssl.SSLContext | None = None,
) -> tuple[int, bytes]:
    """Makes one HTTP/1.1 request on a connection of its own (closed
    after the answer) and returns the answer's status and body (at most
    ``limit`` bytes and one more). ``url`` is ``http://`` or ``https://``;
    an ``https://`` gateway's certificate is checked with ``ssl_context``,
    or the default context (the system's roots)."""
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"not an http or https URL: {url!r}")
    tls = u.scheme == "https"
    port = u.port or (443 if tls else 80)
    reader, writer = await asyncio.open_connection(
        u.hostname, port, ssl=(ssl_context or ssl.create_default_context()) if tls else None, limit=_MAX_HEADER_LINE
    )
    try:
        target = (u.path or "/") + (f"?{u.query}" if u.query else "")
        host = u.netloc.rsplit("@", 1)[-1]
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", "Connection: close", f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()
        status_line = await reader.readuntil(b"\r\n")
        parts = status_line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise ValueError(f"not an HTTP answer: {status_line[:200]!r}")
        status = int(parts[1])
        answer: dict[str, str] = {}
        for _ in range(_MAX_HEADERS):
            line = await reader.readuntil(b"\r\n")
            if line == b"\r\n":
                break
            name, _, value = line.decode("latin-1").partition(":")
            answer[name.strip().lower()] = value.strip()
        else:
            raise ValueError(f"an HTTP answer with over {_MAX_HEADERS} headers")
        return status, await read_body(reader, answer, limit)
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except (OSError, ssl.SSLError):
            pass  # the answer is read; how the connection ends does not matter
