"""mcpp: the Python client of the MCPP pod gateway (asyncio, websockets).

Join a pod, send, and read everything in order::

    import asyncio, mcpp

    async def main() -> None:
        async with mcpp.connect("ws://127.0.0.1:8080", pod="lab", participant="alice") as client:
            print("I am", client.id, "with", client.welcome["participants"])
            await client.send({"kind": "chat", "payload": {"text": "hello"}})
            async for item in client:
                if isinstance(item, mcpp.Reconnected):
                    continue  # item.resumed False: envelopes may be missing
                print(item.from_, item.kind, item.payload)

    asyncio.run(main())

The client reconnects by itself and resumes after the last envelope it
handed out, so its user sees every envelope once and in order
(docs/protocol.md section 8). :func:`publish` sends without joining.
Errors are :class:`RefusedError` (an HTTP refusal: ``status``, ``code``),
:class:`GatewayError` (a ``system/error``: ``code``) and
:class:`ClosedError` (a close code: ``code``; :class:`TokenExpiredError`,
:class:`RevokedError` and :class:`KickedError` for 4401, 4403 and 4410),
all :class:`MCPPError`.
"""

from .client import Client, Connecting, Reconnected, connect
from .connection import SERVES_MCP
from .envelope import Context, Envelope, new_id
from .trace import OPENTELEMETRY, context_of, valid_traceparent
from .errors import (
    CLOSE_GOING_AWAY,
    CLOSE_INTERNAL_ERROR,
    CLOSE_KICKED,
    CLOSE_MESSAGE_TOO_BIG,
    CLOSE_NORMAL,
    CLOSE_ORDER_LOST,
    CLOSE_REPLACED,
    CLOSE_REVOKED,
    CLOSE_SLOW_CONSUMER,
    CLOSE_TOKEN_EXPIRED,
    ClientClosedError,
    ClosedError,
    DisconnectedError,
    GatewayError,
    KickedError,
    MCPPError,
    ProtocolError,
    RefusedError,
    RevokedError,
    TokenExpiredError,
)
from .publish import publish, result_error

__version__ = "0.1.0"

__all__ = [
    "OPENTELEMETRY",
    "context_of",
    "valid_traceparent",
    "CLOSE_GOING_AWAY",
    "CLOSE_INTERNAL_ERROR",
    "CLOSE_KICKED",
    "CLOSE_MESSAGE_TOO_BIG",
    "CLOSE_NORMAL",
    "CLOSE_ORDER_LOST",
    "CLOSE_REPLACED",
    "CLOSE_REVOKED",
    "CLOSE_SLOW_CONSUMER",
    "CLOSE_TOKEN_EXPIRED",
    "SERVES_MCP",
    "Client",
    "ClientClosedError",
    "ClosedError",
    "Connecting",
    "Context",
    "DisconnectedError",
    "Envelope",
    "GatewayError",
    "KickedError",
    "MCPPError",
    "ProtocolError",
    "Reconnected",
    "RefusedError",
    "RevokedError",
    "TokenExpiredError",
    "connect",
    "new_id",
    "publish",
    "result_error",
]
