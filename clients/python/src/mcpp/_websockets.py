"""What differs between versions of the websockets library, in one place.

websockets 13 and later have the asyncio API
(``websockets.asyncio.client.connect``, ``additional_headers``, a refusal
raised as ``InvalidStatus`` with the whole response, body included).
Earlier versions, such as Debian 12's 10.4, have only the legacy API
(``websockets.legacy.client.connect``, ``extra_headers``, a refusal raised
as ``InvalidStatusCode`` with the status alone): there the body of a
refusal, which holds the gateway's code (docs/protocol.md section 1), is
read through the legacy protocol's documented hook,
``read_http_response``, which leaves the body in the protocol's reader.

Both give connections with the same ``recv``, ``send`` and ``close``, and
raise the same ``ConnectionClosed``, whose ``rcvd`` is the close frame
received, if any.
"""

from __future__ import annotations

import asyncio
import importlib
import ssl
from collections.abc import Sequence
from typing import Any, Protocol, cast

from websockets.version import version as _version
from websockets.exceptions import ConnectionClosed, WebSocketException

from ._http import read_body
from .errors import RefusedError

__all__ = ["ConnectionClosed", "WebSocket", "abort", "close_frame", "open_websocket", "websockets_version", "WebSocketException"]

websockets_version: str = _version

# The refusal's body is small JSON; more is not the gateway's.
_REFUSAL_BODY_LIMIT = 4096


class WebSocket(Protocol):
    """One connection, of either API."""

    async def recv(self) -> str | bytes: ...

    async def send(self, message: str) -> None: ...

    async def close(self, code: int = 1000, reason: str = "") -> None: ...

    @property
    def transport(self) -> Any: ...


def abort(ws: WebSocket) -> None:
    """Drops the connection at once, without a closing handshake."""
    ws.transport.abort()


def close_frame(exc: ConnectionClosed) -> tuple[int, str] | None:
    """The code and reason of the close frame the gateway sent, or
    ``None`` when the connection ended without one."""
    rcvd = exc.rcvd
    if rcvd is None:
        return None
    return int(rcvd.code), str(rcvd.reason)


def _tls_argument(url: str, ssl_context: ssl.SSLContext | None) -> dict[str, Any]:
    """The ``ssl`` argument of either API's connect: the context, for a
    ``wss://`` URL alone (both refuse one for ``ws://``); none leaves the
    library's default context."""
    if ssl_context is None or not url.startswith("wss://"):
        return {}
    return {"ssl": ssl_context}


try:
    # Imported by name, so that type checkers see the same module whichever
    # version is installed.
    _connect: Any = importlib.import_module("websockets.asyncio.client").connect
    from websockets.exceptions import InvalidStatus

    async def open_websocket(
        url: str, headers: Sequence[tuple[str, str]], *, open_timeout: float, max_size: int, ssl_context: ssl.SSLContext | None = None
    ) -> WebSocket:
        """Opens a WebSocket connection at ``url``; a refused upgrade is a
        :class:`RefusedError` with the gateway's status and code. A
        ``wss://`` gateway's certificate is checked with ``ssl_context``, or
        the default context (the system's roots)."""
        try:
            ws: Any = await _connect(
                url,
                additional_headers=list(headers),
                open_timeout=open_timeout,
                max_size=max_size,
                compression=None,  # the gateway does not negotiate it
                **_tls_argument(url, ssl_context),
            )
        except InvalidStatus as exc:
            response = exc.response
            raise RefusedError.from_body(response.status_code, bytes(response.body or b"")[:_REFUSAL_BODY_LIMIT]) from None
        return cast(WebSocket, ws)

except ImportError:  # websockets before 13: the legacy API alone
    from websockets.exceptions import InvalidStatusCode
    from websockets.legacy.client import WebSocketClientProtocol
    from websockets.legacy.client import connect as _legacy_connect

    class _Protocol(WebSocketClientProtocol):
        """The legacy client's protocol, reading the body of a refusal and
        raising it as a :class:`RefusedError` (redirects are followed as
        before)."""

        async def read_http_response(self) -> Any:
            status, headers = await super().read_http_response()
            if status != 101 and not 300 <= status < 400:
                try:
                    body = await read_body(self.reader, headers, _REFUSAL_BODY_LIMIT)
                except (OSError, ValueError, EOFError, asyncio.LimitOverrunError):
                    body = b""  # the status alone still says no
                raise RefusedError.from_body(status, body[:_REFUSAL_BODY_LIMIT])
            return status, headers

    async def open_websocket(
        url: str, headers: Sequence[tuple[str, str]], *, open_timeout: float, max_size: int, ssl_context: ssl.SSLContext | None = None
    ) -> WebSocket:
        """Opens a WebSocket connection at ``url``; a refused upgrade is a
        :class:`RefusedError` with the gateway's status and code. A
        ``wss://`` gateway's certificate is checked with ``ssl_context``, or
        the default context (the system's roots)."""
        try:
            ws: Any = await _legacy_connect(
                url,
                create_protocol=cast(Any, _Protocol),
                extra_headers=list(headers),
                open_timeout=open_timeout,
                max_size=max_size,
                compression=None,  # the gateway does not negotiate it
                **_tls_argument(url, ssl_context),
            )
        except InvalidStatusCode as exc:  # pragma: no cover - _Protocol raises first
            raise RefusedError(exc.status_code, None, "") from None
        return cast(WebSocket, ws)
