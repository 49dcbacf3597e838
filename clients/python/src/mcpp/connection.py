"""One WebSocket connection to a pod, up to its welcome (docs/protocol.md
sections 1, 4 and 8): the upgrade's URL and query, the first message,
and each message split into its envelopes. A :class:`mcpp.Client` is made
of these, one per connection; it is the client that reconnects."""

from __future__ import annotations

import asyncio
import json
import ssl
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from ._websockets import ConnectionClosed, WebSocket, abort, close_frame, open_websocket
from .envelope import Envelope
from .errors import ClosedError, DisconnectedError, MCPPError, ProtocolError

__all__ = ["FILTER_NAMES", "SERVES_MCP", "Connection", "base_url", "dial_url", "filter_query", "split", "without_token"]

GATEWAY_ID = "system:gateway"

# The value of serves (connect's serves=, an identity's "serves") of a
# participant that answers MCP requests: an MCP server in the pod, such as
# mcpp bridge (docs/protocol.md section 11).
SERVES_MCP = "mcp"

# The filter's names, which are both its query parameters and its JSON
# fields (docs/protocol.md section 4, wire.Filter), by the kind of value.
_BOOLS = ("main", "subtree", "conclusions", "echo", "batch")
_LISTS = ("types", "exclude_types", "ids")
_WORDS = ("contexts", "routing")
FILTER_NAMES = ("main", "contexts", "types", "exclude_types", "ids", "subtree", "conclusions", "routing", "echo", "batch")


def filter_query(filter: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The filter as the upgrade's query parameters: booleans as ``1`` or
    ``0``, lists comma-separated (a string is taken as the wire's list),
    ``None`` and empty lists left out (the gateway's default). A name that
    is not a filter's is a ``ValueError``: the gateway would ignore it."""
    out: list[tuple[str, str]] = []
    for name, value in filter.items():
        if name not in FILTER_NAMES:
            raise ValueError(f"filter: unknown name {name!r}; the names are {', '.join(FILTER_NAMES)}")
        if value is None:
            continue
        if name in _BOOLS:
            if isinstance(value, bool):
                out.append((name, "1" if value else "0"))
            elif isinstance(value, str):
                out.append((name, value))  # the wire's 0/1/true/false; the gateway judges it
            else:
                raise ValueError(f"filter: {name} is a bool, not {value!r}")
        elif name in _LISTS:
            if isinstance(value, str):
                out.append((name, value))
            elif isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
                if value:
                    out.append((name, ",".join(value)))
            else:
                raise ValueError(f"filter: {name} is a list of strings or a comma-separated string, not {value!r}")
        else:
            if not isinstance(value, str):
                raise ValueError(f"filter: {name} is a string, not {value!r}")
            out.append((name, value))
    return out


def base_url(
    url: str,
    pod: str,
    participant: str | None,
    protocol: str | None,
    serves: Sequence[str] | None = None,
    observe: bool = False,
) -> str:
    """The upgrade URL with what every connection of a client sends: the
    gateway's ``/ws`` (added to ``ws://HOST:PORT``; ``http`` and ``https``
    are taken as ``ws`` and ``wss``), the pod, the participant, the
    protocol, what it serves (``serves=``, comma-separated) and
    ``observe=1``. Every connection, reconnections included, must say the
    last two: without them an MCP server would be a participant nobody
    asks, and an observer would be announced to the pod."""
    if not isinstance(pod, str) or not pod:
        raise ValueError("pod is required")
    a_list = isinstance(serves, Sequence) and not isinstance(serves, str) and all(isinstance(v, str) for v in serves)
    if serves is not None and not a_list:
        raise ValueError(f'serves is a list of strings, such as ["mcp"], not {serves!r}')
    if not isinstance(observe, bool):
        raise ValueError(f"observe is a bool, not {observe!r}")
    u = urllib.parse.urlsplit(url)
    scheme = {"ws": "ws", "wss": "wss", "http": "ws", "https": "wss"}.get(u.scheme)
    if scheme is None or not u.netloc:
        raise ValueError(f"the gateway's URL {url!r}: it must be ws://HOST:PORT (or wss, http, https)")
    path = u.path if u.path not in ("", "/") else "/ws"
    ours = {"pod", "participant", "protocol"}
    if serves:
        ours.add("serves")
    if observe:
        ours.add("observe")
    query = [(k, v) for k, v in urllib.parse.parse_qsl(u.query, keep_blank_values=True) if k not in ours]
    query.append(("pod", pod))
    if participant:
        query.append(("participant", participant))
    if protocol:
        query.append(("protocol", protocol))
    if serves:
        query.append(("serves", ",".join(serves)))
    if observe:
        query.append(("observe", "1"))
    return urllib.parse.urlunsplit((scheme, u.netloc, path, urllib.parse.urlencode(query), ""))


def without_token(base: str) -> str:
    """``base`` without a ``token`` in its query: once a fresh token is
    sent in the Authorization header (:meth:`mcpp.Client.refresh`), the
    old one must not travel in the URL any more."""
    u = urllib.parse.urlsplit(base)
    query = [(k, v) for k, v in urllib.parse.parse_qsl(u.query, keep_blank_values=True) if k != "token"]
    return urllib.parse.urlunsplit((u.scheme, u.netloc, u.path, urllib.parse.urlencode(query), ""))


def dial_url(base: str, filter: Sequence[tuple[str, str]], resume: str | None, history: int | str | None, fold: bool | None) -> str:
    """The URL of one connection: ``base`` with the filter, what to resume
    after, and the history to replay (``history=N`` or ``all``, and
    ``fold=0`` when ``fold`` is False)."""
    query = list(filter)
    if resume:
        query.append(("resume", resume))
    if history:
        query.append(("history", str(history)))
        if fold is False:
            query.append(("fold", "0"))
    if not query:
        return base
    return base + "&" + urllib.parse.urlencode(query)


def split(message: str | bytes) -> list[Envelope]:
    """The envelopes of one WebSocket message: one, or with ``batch=1``
    several, one a line. A line that is not a JSON object is skipped: the
    gateway writes none."""
    if isinstance(message, bytes):
        return []  # the gateway sends text alone
    out: list[Envelope] = []
    for line in message.split("\n"):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(Envelope(value))
    return out


def lost(exc: BaseException) -> MCPPError:
    """How a connection ended, from what its read raised: a
    :class:`ClosedError` when the gateway sent a close code, else a
    :class:`DisconnectedError`."""
    if isinstance(exc, ConnectionClosed):
        frame = close_frame(exc)
        if frame is not None:
            return ClosedError.of(*frame)
    err = DisconnectedError(f"the connection was lost: {exc}" if str(exc) else "the connection was lost")
    err.__cause__ = exc
    return err


class Connection:
    """One welcomed WebSocket connection: ``welcome`` is the gateway's
    ``system/welcome`` envelope and ``rest`` what came after it in the
    same message (with ``batch=1``). ``lost`` is done once reading it has
    stopped."""

    def __init__(self, ws: WebSocket, welcome: Envelope, rest: list[Envelope]) -> None:
        self.ws = ws
        self.welcome = welcome
        self.rest = rest
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @classmethod
    async def open(
        cls, url: str, headers: Sequence[tuple[str, str]], *, open_timeout: float, max_size: int, ssl_context: ssl.SSLContext | None = None
    ) -> Connection:
        """Upgrades at ``url`` and reads the welcome, all within
        ``open_timeout`` seconds (``TimeoutError`` past it). A refused
        upgrade is a :class:`mcpp.RefusedError`; a ``wss://`` gateway's
        certificate is checked with ``ssl_context`` (None: the system's
        roots)."""
        async with asyncio.timeout(open_timeout):
            ws = await open_websocket(url, headers, open_timeout=open_timeout, max_size=max_size, ssl_context=ssl_context)
            try:
                message = await ws.recv()
            except ConnectionClosed as exc:
                raise lost(exc) from None
            except BaseException:
                abort(ws)
                raise
        envelopes = split(message)
        if not envelopes or envelopes[0].kind != "system/welcome" or not isinstance(envelopes[0].payload, dict):
            await ws.close()
            shown = message[:200] if isinstance(message, str) else "a binary message"
            raise ProtocolError(f"the first message is not a system/welcome: {shown!r}")
        return cls(ws, envelopes[0], envelopes[1:])

    async def recv(self) -> list[Envelope]:
        """The envelopes of the next message; raises
        :class:`mcpp.ClosedError` or :class:`mcpp.DisconnectedError` when
        the connection ends."""
        try:
            message = await self.ws.recv()
        except ConnectionClosed as exc:
            raise lost(exc) from None
        except OSError as exc:
            raise lost(exc) from None
        return split(message)

    async def send(self, data: str) -> None:
        """Writes one message; raises the legacy or current
        ``ConnectionClosed`` of websockets when the connection has ended."""
        await self.ws.send(data)

    async def close(self) -> None:
        """Leaves with a normal closure (1000)."""
        await self.ws.close(1000, "")

    def abort(self) -> None:
        """Drops the connection without a closing handshake."""
        abort(self.ws)
