"""The client: one participant in one pod, kept connected.

:func:`connect` joins a pod and returns a :class:`Client` once the gateway
has welcomed it. The client reads ahead into a buffer; ``async for`` takes
what it read, in order: the welcome first, then every envelope of the pod,
the gateway's own (presence, errors, context events) included, and a
:class:`Reconnected` after each reconnection. When the connection is lost,
the client dials again with backoff and ``resume=`` the id of the last
envelope of the pod it handed out, so that the envelopes sent meanwhile
follow, none missing and none twice (docs/protocol.md section 8).
"""

from __future__ import annotations

import asyncio
import json
import random
import ssl as _ssl
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Generator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from ._tls import client_context
from ._websockets import ConnectionClosed, WebSocketException
from .connection import FILTER_NAMES, GATEWAY_ID, Connection, base_url, dial_url, filter_query, without_token
from .envelope import Context, Envelope, new_id
from .errors import (
    ClientClosedError,
    ClosedError,
    DisconnectedError,
    GatewayError,
    MCPPError,
    ProtocolError,
    RefusedError,
)
from .trace import trace_for

__all__ = ["Client", "Connecting", "Reconnected", "connect"]

# Defaults of connect(), each with its reason.
DEFAULT_OPEN_TIMEOUT = 10.0  # seconds for one dial, up to the welcome
DEFAULT_BUFFER = 1024  # items read ahead; then the client stops reading, and the gateway cuts it at send_queue (4008)
DEFAULT_MAX_SIZE = 64 << 20  # largest message read: a batch of 256 envelopes of twice the default 1 MiB fits
DEFAULT_MIN_DELAY = 0.1  # seconds before the first reconnection attempt
DEFAULT_MAX_DELAY = 10.0  # seconds between attempts at most; each wait is drawn in its upper half (jitter)

# Envelope ids remembered as sent again after a lost connection, whose
# duplicate_id refusal means that the first try got through.
_MAX_RESENT = 4096
# system/context ids handed out since the last envelope of the pod, which
# a resume replays again. Past this many, the client resumes after the
# newest of them instead (the gateway knows their ids too).
_MAX_CONTEXT_EVENTS = 4096


@dataclass(frozen=True)
class Reconnected:
    """In the stream after a lost connection is back.

    ``resumed`` True means nothing was lost: the envelopes sent meanwhile
    follow, none missing and none twice. False (``gap``) means some may be
    missing: the gateway no longer had the envelope the client resumed
    after, had no history, or the client had received no envelope of the
    pod to resume after. ``welcome`` is the new connection's welcome
    payload (its ``participants`` are the ones to trust: presence events
    missed while away are not replayed).
    """

    resumed: bool
    resumed_after: str | None
    welcome: dict[str, Any]
    envelope: Envelope = field(repr=False)
    cause: MCPPError
    attempts: int

    @property
    def gap(self) -> bool:
        """Whether envelopes may have been missed while the connection
        was down."""
        return not self.resumed


def _check_history(history: int | str | None) -> int | str | None:
    if history is None or history == 0:
        return None
    if history == "all":
        return "all"
    if isinstance(history, bool) or not isinstance(history, int) or history < 0:
        raise ValueError(f'history is a positive number of envelopes or "all", not {history!r}')
    return history


def _counts_for_resume(env: Envelope) -> bool:
    """Whether the client may resume after this envelope: one of the pod
    (not system/*, nor a request) that the pod's history keeps (not
    ephemeral)."""
    kind = env.kind
    if kind.startswith("system/") or kind.startswith("gateway/"):
        return False
    lifecycle = env.get("lifecycle")
    return not (isinstance(lifecycle, dict) and lifecycle.get("mode") == "ephemeral")


def _correlation_ids(env: Envelope) -> list[str]:
    corr = env.get("correlation_id")
    if isinstance(corr, str):
        return [corr]
    if isinstance(corr, list):
        return [c for c in corr if isinstance(c, str)]
    return []


def _answer_payload(answer: Envelope) -> dict[str, Any]:
    """The payload of an answer of the gateway, which is an object."""
    payload = answer.payload
    if not isinstance(payload, dict):
        raise ProtocolError(f"the gateway's {answer.kind} answer has no object payload: {payload!r}")
    return payload


def _dumps(envelope: Mapping[str, Any]) -> str:
    return json.dumps(envelope, ensure_ascii=False, separators=(",", ":"))


def _unjudged(eid: str, when: str, welcome: Mapping[str, Any]) -> DisconnectedError:
    """The error of an envelope whose connection was lost ``when`` (while
    writing it, or before the gateway judged it), and that the client does
    not write again because the gateway could not recognise a second
    copy."""
    limits = welcome.get("limits")
    history = limits.get("history", 0) if isinstance(limits, dict) else 0
    why = " (the gateway keeps no history, so a second copy would not be recognised)" if not history else ""
    return DisconnectedError(f"the connection was lost {when} envelope {eid}: it may or may not have been relayed{why}")


class _Fence:
    """The confirmation of the sends written on one connection.

    The gateway answers only refusals, and answers in order. So after
    sends it writes a request that changes nothing, ``gateway/filter``
    with ``{}``: once its answer comes (any answer, a refusal of the
    request itself too), every refusal of what was written before it has
    come, and the sends not refused were accepted. One fence is in
    flight at a time; the sends written meanwhile wait for the next, so
    that sends in flight together share one.
    """

    def __init__(self, client: Client, conn: Connection) -> None:
        self.conn = conn
        self._client = client
        self._batch: asyncio.Future[None] | None = None  # what the sends written since the last fence wait for
        self._task: asyncio.Task[None] | None = None

    def after(self) -> asyncio.Future[None]:
        """What a send just written on the connection waits for: done
        when the answer to a fence written after it has come; raises
        :class:`DisconnectedError` when the connection is lost first (or
        what ended the client)."""
        loop = asyncio.get_running_loop()
        if self._batch is None:
            self._batch = loop.create_future()
        batch = self._batch
        if self._task is None:
            self._task = loop.create_task(self._run(), name="mcpp fence")
        return batch

    async def _run(self) -> None:
        try:
            # One turn of the loop first: the sends started together
            # (gather) write theirs, and share this fence.
            await asyncio.sleep(0)
            while self._batch is not None:
                batch, self._batch = self._batch, None
                try:
                    await self._client._fence_round_trip(self.conn)
                except Exception as exc:
                    err = exc if isinstance(exc, MCPPError) else DisconnectedError(f"the connection failed: {exc!r}")
                    for b in (batch, self._batch):
                        if b is not None and not b.done():
                            b.set_exception(err)
                            b.exception()  # retrieved: every waiter may have given up
                    self._batch = None
                    return
                if not batch.done():
                    batch.set_result(None)
        finally:
            self._task = None


class Client:
    """One participant in one pod: a WebSocket connection to the gateway,
    and the reconnections that keep it. Made by :func:`connect`.

    ``async for item in client`` yields each :class:`Envelope` received,
    in order (the welcome first, the gateway's ``system/*`` ones
    included, except the answers to :meth:`request` and the refusals
    that :meth:`send` raises), and a
    :class:`Reconnected` after each reconnection. The loop ends after
    :meth:`close`; when the client ends for another reason (close 4000;
    4401, 4403 and 4410, as :class:`TokenExpiredError`,
    :class:`RevokedError` and :class:`KickedError`; a refused
    reconnection; ``reconnect=False``), it raises that error once the
    items read before are taken.
    """

    def __init__(
        self,
        *,
        base: str,
        headers: list[tuple[str, str]],
        filter: list[tuple[str, str]],
        resume: str | None,
        reconnect: bool,
        min_delay: float,
        max_delay: float,
        max_attempts: int,
        open_timeout: float,
        max_size: int,
        buffer: int,
        ssl_context: _ssl.SSLContext | None = None,
    ) -> None:
        self._base = base
        self._ssl = ssl_context  # for wss://; None: the system's roots
        self._headers = headers
        self._filter_query = filter
        self._reconnect = reconnect
        self._min_delay = min_delay
        self._max_delay = max(max_delay, min_delay)
        self._max_attempts = max_attempts
        self._open_timeout = open_timeout
        self._max_size = max_size

        self._items: deque[Envelope | Reconnected] = deque()
        self._buffer = buffer
        self._readable = asyncio.Event()  # set when an item is there, or the client ended
        self._writable = asyncio.Event()  # set when an item was taken

        self._conn: Connection | None = None
        self._ready = asyncio.Event()  # set while a connection is live, and once the client ended
        self._welcome: dict[str, Any] = {}
        self._task: asyncio.Task[None] | None = None
        self._closed = False  # close() was called
        self._ended = False
        self._end_error: MCPPError | None = None  # why the client ended, unless closed

        self._pending: dict[str, asyncio.Future[Envelope]] = {}  # requests waiting, by id
        self._confirming: dict[str, asyncio.Future[Envelope]] = {}  # sends waiting for a refusal, by id
        self._resent: dict[str, None] = {}  # ids sent again, oldest first
        self._fence_of: _Fence | None = None  # the fence of the connection last sent on

        # Read by the reading task alone.
        self._resume_id = resume  # the last envelope of the pod handed out
        self._last_id: str | None = None  # the last envelope handed out
        self._context_events: set[str] = set()  # system/context ids handed out since _resume_id

    # -- the connection's life ------------------------------------------

    async def _start(self, history: int | str | None, fold: bool | None) -> None:
        url = dial_url(self._base, self._filter_query, self._resume_id, history, fold)
        conn = await Connection.open(
            url, self._headers, open_timeout=self._open_timeout, max_size=self._max_size, ssl_context=self._ssl
        )
        self._use(conn)
        self._items.append(conn.welcome)
        self._readable.set()
        self._task = asyncio.get_running_loop().create_task(self._run(conn), name="mcpp client")

    def _use(self, conn: Connection) -> None:
        """Makes ``conn`` the live connection."""
        payload: dict[str, Any] = conn.welcome.payload
        self._conn = conn
        self._welcome = payload
        if isinstance(payload.get("filter"), dict):
            self._set_filter(payload["filter"])
        self._ready.set()

    def _set_filter(self, effective: Mapping[str, Any]) -> None:
        """Keeps the filter in effect, for the next connection."""
        try:
            self._filter_query = filter_query({k: v for k, v in effective.items() if k in FILTER_NAMES})
        except ValueError:
            pass  # not a filter this client can write; keep the one it had

    async def _run(self, conn: Connection) -> None:
        """Reads each connection, and makes the next when one is lost,
        until the client ends."""
        while True:
            try:
                cause = await self._read(conn)
            except Exception as exc:  # a bug of this client: end it rather than hang its users
                err = MCPPError(f"the client stopped reading: {exc!r}")
                err.__cause__ = exc
                conn.abort()
                self._end(err)
                return
            self._conn = None
            self._ready.clear()
            if not conn.lost.done():
                conn.lost.set_result(None)
            if self._closed:
                self._end(None)
                return
            if not self._reconnect or (isinstance(cause, ClosedError) and cause.final):
                self._end(cause)
                return
            try:
                conn = await self._redial(cause)
            except MCPPError as err:
                self._end(err)
                return

    async def _read(self, conn: Connection) -> MCPPError:
        """Hands out what ``conn`` receives until it ends, and returns why
        it ended."""
        try:
            for env in conn.rest:
                await self._dispatch(env)
            while True:
                for env in await conn.recv():
                    await self._dispatch(env)
        except (ClosedError, DisconnectedError) as err:
            return err

    async def _redial(self, cause: MCPPError) -> Connection:
        """Dials until a connection is welcomed, the gateway refuses it for
        good (400, 401, 403), or ``max_attempts`` are spent."""
        last: BaseException = cause
        attempt = 0
        while True:
            if self._max_attempts and attempt >= self._max_attempts:
                err = DisconnectedError(f"gave up reconnecting after {attempt} attempts: {last} (the connection was lost: {cause})")
                err.__cause__ = last
                raise err
            await asyncio.sleep(self._backoff(attempt))
            attempt += 1
            resume = self._resume_id
            url = dial_url(self._base, self._filter_query, resume, None, None)
            try:
                conn = await Connection.open(
                    url, self._headers, open_timeout=self._open_timeout, max_size=self._max_size, ssl_context=self._ssl
                )
            except RefusedError as err:
                if not err.temporary:
                    raise
                last = err
                continue
            except (OSError, TimeoutError, MCPPError, WebSocketException) as err:
                last = err
                continue
            self._use(conn)
            history = conn.welcome.payload.get("history")
            resumed = bool(resume) and isinstance(history, dict) and history.get("resumed") is True
            await self._emit(
                Reconnected(
                    resumed=resumed,
                    resumed_after=resume,
                    welcome=conn.welcome.payload,
                    envelope=conn.welcome,
                    cause=cause,
                    attempts=attempt,
                )
            )
            return conn

    def _backoff(self, attempt: int) -> float:
        """The wait before attempt ``attempt`` (from 0): ``min_delay``
        doubled each time, at most ``max_delay``, of which a random half is
        taken off, so that the participants of a gateway that restarts do
        not all come back at once."""
        d = self._max_delay if attempt >= 32 else min(self._min_delay * (1 << attempt), self._max_delay)
        return d / 2 + random.uniform(0, d / 2)

    def _end(self, err: MCPPError | None) -> None:
        """Ends the client: with ``err``, or ``None`` after close()."""
        if self._ended:
            return
        self._ended = True
        self._end_error = err
        self._conn = None
        reason: MCPPError = err if err is not None else ClientClosedError("the client was closed")
        for waiting in (self._pending, self._confirming):
            for fut in waiting.values():
                if not fut.done():
                    fut.set_exception(reason)
                    fut.exception()  # retrieved here too: a waiter cancelled meanwhile leaves none to
        self._ready.set()
        self._readable.set()
        self._writable.set()

    # -- what comes in --------------------------------------------------

    async def _dispatch(self, env: Envelope) -> None:
        """Hands one envelope received to whoever waits for it: a request,
        a confirmed send, or the stream."""
        if env.get("from") == GATEWAY_ID and self._answer(env):
            return
        kind = env.kind
        if kind == "system/error":
            payload = env.payload
            if isinstance(payload, dict) and payload.get("error") == "duplicate_id":
                ids = _correlation_ids(env)
                if ids and ids[0] in self._resent:
                    del self._resent[ids[0]]
                    return  # sent again after a lost connection: the first try got through
            await self._emit(env)
            return
        if kind == "system/filter" and isinstance(env.payload, dict):
            self._set_filter(env.payload)  # an answer to a request sent with send()
        if kind == "system/context":
            cid = env.id
            if cid and cid in self._context_events:
                return  # handed out before the connection was lost, and replayed by the resume
            await self._emit(env)
            if cid:
                if len(self._context_events) >= _MAX_CONTEXT_EVENTS:
                    self._resume_id = cid
                    self._context_events.clear()
                else:
                    self._context_events.add(cid)
            return
        if kind.startswith("system/"):
            await self._emit(env)  # welcome, presence, answers nobody waits for: not the pod's
            return
        eid = env.id
        if eid and eid == self._last_id:
            return  # a resume that replays the envelope it resumes after
        await self._emit(env)
        self._last_id = eid
        if eid and _counts_for_resume(env):
            self._resume_id = eid
            self._context_events.clear()

    def _answer(self, env: Envelope) -> bool:
        """Hands an answer of the gateway to the request (or confirmed
        send) it answers; reports whether one was waiting."""
        for cid in _correlation_ids(env):
            fut = self._pending.pop(cid, None)
            if fut is None and env.kind == "system/error":
                fut = self._confirming.pop(cid, None)
            if fut is not None:
                if env.kind == "system/filter" and isinstance(env.payload, dict):
                    self._set_filter(env.payload)
                if not fut.done():
                    fut.set_result(env)
                return True
        return False

    async def _emit(self, item: Envelope | Reconnected) -> None:
        while len(self._items) >= self._buffer and not self._ended:
            self._writable.clear()
            await self._writable.wait()
        self._items.append(item)
        self._readable.set()

    def __aiter__(self) -> AsyncIterator[Envelope | Reconnected]:
        return self

    async def __anext__(self) -> Envelope | Reconnected:
        while True:
            if self._items:
                item = self._items.popleft()
                self._writable.set()
                return item
            if self._ended:
                if self._end_error is None:
                    raise StopAsyncIteration
                raise self._end_error
            self._readable.clear()
            await self._readable.wait()

    # -- what goes out --------------------------------------------------

    @property
    def welcome(self) -> dict[str, Any]:
        """The welcome's payload (``you``, ``participants``, ``pod``,
        ``filter``, ``limits``, ``history``), of the current connection
        (after a reconnection, the new one's). An identity (``you``, each
        of ``participants``, as a presence event's ``participant``) is
        ``{"id", "capabilities", "serves"?}``: ``"serves": ["mcp"]`` for
        an MCP server (``connect(serves=...)``), absent otherwise."""
        return self._welcome

    @property
    def id(self) -> str:
        """The participant id the gateway knows the client by."""
        you = self._welcome.get("you")
        return str(you.get("id", "")) if isinstance(you, dict) else ""

    async def _live(self) -> Connection:
        """The live connection, waiting for a reconnection if there is
        none."""
        while True:
            if self._closed:
                raise ClientClosedError("the client was closed")
            if self._ended:
                raise self._end_error or ClientClosedError("the client was closed")
            if self._conn is not None:
                return self._conn
            await self._ready.wait()

    async def _write(self, data: str) -> Connection:
        """Writes one request on the live connection, and again on the
        next when the connection breaks under the write (a request
        changes nothing that asking twice would change twice). Returns
        the connection that took it."""
        while True:
            conn = await self._live()
            try:
                await conn.send(data)
                return conn
            except ConnectionClosed:
                # Written again on the next connection, once the reader
                # has seen this one end.
                await asyncio.shield(conn.lost)

    def _may_send_again(self, envelope: Mapping[str, Any]) -> bool:
        """Whether the gateway would refuse a second copy of the envelope
        with ``duplicate_id`` (docs/protocol.md section 8), so that the
        client may write it again when it cannot tell whether the first
        got through: the gateway keeps history, and the envelope is one it
        stores (not ephemeral, not a request)."""
        limits = self._welcome.get("limits")
        history = limits.get("history", 0) if isinstance(limits, dict) else 0
        return isinstance(history, int) and history > 0 and _counts_for_resume(Envelope(envelope))

    def _mark_resent(self, eid: str) -> None:
        self._resent[eid] = None
        if len(self._resent) > _MAX_RESENT:
            del self._resent[next(iter(self._resent))]

    async def _write_envelope(self, eid: str, data: str, again_ok: bool) -> tuple[Connection, bool]:
        """Writes an envelope on the live connection, waiting for one.
        When the connection breaks under the write, the gateway may or may
        not have it: it is written again on the next connection if
        ``again_ok`` (the gateway would refuse a second copy with
        ``duplicate_id``), and :class:`DisconnectedError` is raised
        otherwise. Returns the connection that took it, and whether it
        was written again."""
        again = False
        while True:
            conn = await self._live()
            if again:
                self._mark_resent(eid)  # its duplicate_id says the first copy got through
            try:
                await conn.send(data)
                return conn, again
            except ConnectionClosed as exc:
                await asyncio.shield(conn.lost)
                if not again_ok:
                    raise _unjudged(eid, "while writing", self._welcome) from exc
                again = True

    def _fence(self, conn: Connection) -> _Fence:
        """The fence of ``conn``, made on its first send."""
        if self._fence_of is None or self._fence_of.conn is not conn:
            self._fence_of = _Fence(self, conn)
        return self._fence_of

    async def _fence_round_trip(self, conn: Connection) -> None:
        """Writes one fence, ``gateway/filter`` with ``{}`` (a request
        that changes nothing), on ``conn`` and waits for its answer. Any
        answer counts, a refusal of the fence itself too (``rate_limited``:
        it takes a rate token like any message): the gateway answers in
        order, so every refusal of what was written before it has come.
        Raises :class:`DisconnectedError` when ``conn`` is lost first."""
        rid = new_id()
        answer: asyncio.Future[Envelope] = asyncio.get_running_loop().create_future()
        self._pending[rid] = answer
        try:
            try:
                await conn.send(_dumps({"id": rid, "kind": "gateway/filter", "payload": {}}))
            except ConnectionClosed as exc:
                raise DisconnectedError("the connection was lost") from exc
            await asyncio.wait((answer, conn.lost), return_when=asyncio.FIRST_COMPLETED)
            if not answer.done():
                raise DisconnectedError("the connection was lost")
            answer.result()  # raises what ended the client meanwhile
        finally:
            self._pending.pop(rid, None)

    async def send(
        self, envelope: Mapping[str, Any], *, confirm: bool = True, traceparent: str | None = None, tracestate: str | None = None
    ) -> str:
        """Sends one envelope to the pod and returns its id once the
        gateway has accepted it; raises :class:`GatewayError` (its
        ``code``: ``"capability_violation"``, ...) when the gateway
        refused it.

        ``envelope`` is a ``dict`` (or an :class:`Envelope`) with at least
        ``kind``; leave ``protocol``, ``ts`` and ``from`` out, the gateway
        fills them. An envelope without an ``id`` gets a new UUIDv4,
        written into it (when it is mutable), so that sending it again
        carries the same id: when the first try got through, the gateway
        refuses the second with ``duplicate_id`` rather than relay it
        twice.

        The gateway answers only refusals. To learn that an envelope was
        accepted, the client follows what it writes with a request that
        changes nothing (``gateway/filter`` with ``{}``), whose answer
        the gateway writes after its judgement of everything before it:
        sends in flight together (``asyncio.gather``) share one such
        request, which takes one of your rate tokens like any message.

        ``traceparent`` (and ``tracestate``) is the W3C trace context to send
        the envelope in (its ``trace`` field, docs/protocol.md section 1),
        when it has none; without it, the active OpenTelemetry span's, when
        ``opentelemetry-api`` is installed. A received envelope's ``trace``
        is its sender's (or the gateway's span): :func:`mcpp.context_of`
        continues it.

        ``confirm=False`` returns once the envelope is written, with no
        round trip: a refusal then comes in the stream, as a
        ``system/error`` whose ``correlation_id`` is this id
        (``GatewayError.from_envelope`` makes it an error).

        While the client reconnects, ``send`` waits for the new connection
        (bound it with ``asyncio.timeout``). An envelope whose connection
        is lost before the gateway judged it (or, with ``confirm=False``,
        under the write) is written again on the next connection when the
        gateway would recognise a second copy (it keeps history, and the
        envelope is not ephemeral): its ``duplicate_id`` then means the
        first copy got through, and is not an error. Otherwise ``send``
        raises :class:`DisconnectedError`: it may or may not have been
        relayed.
        """
        if not isinstance(envelope, Mapping):
            raise TypeError(f"send takes an envelope (a dict), not {type(envelope).__name__}")
        kind = envelope.get("kind")
        if not isinstance(kind, str) or not kind:
            raise ValueError("an envelope needs a kind (a non-empty string)")
        eid = envelope.get("id")
        if eid is None or eid == "":
            eid = new_id()
            if isinstance(envelope, MutableMapping):
                envelope["id"] = eid
            else:
                envelope = {**envelope, "id": eid}
        if not isinstance(eid, str):
            raise ValueError(f"an envelope's id is a string, not {eid!r}")
        trace = trace_for(envelope, traceparent, tracestate)
        data = _dumps({**envelope, "trace": trace} if trace else envelope)
        if not confirm:
            await self._write_envelope(eid, data, self._may_send_again(envelope))
            return eid
        refusal: asyncio.Future[Envelope] = asyncio.get_running_loop().create_future()
        self._confirming[eid] = refusal
        try:
            again = False
            while True:
                conn, rewritten = await self._write_envelope(eid, data, self._may_send_again(envelope))
                again = again or rewritten
                try:
                    # Shielded: the fence is shared, and one send given up
                    # (a timeout) must not cancel it for the others.
                    await asyncio.shield(self._fence(conn).after())
                    break
                except DisconnectedError as lost:
                    if refusal.done():
                        break  # refused before the connection was lost
                    if not self._may_send_again(envelope):
                        raise _unjudged(eid, "before the gateway judged", self._welcome) from lost
                    again = True  # written again on the next connection; duplicate_id then means it got through
            if refusal.done():
                err = GatewayError.from_envelope(refusal.result())
                if not (again and err.code == "duplicate_id"):
                    raise err
            return eid
        finally:
            self._confirming.pop(eid, None)
            self._resent.pop(eid, None)

    async def _round_trip(self, request: dict[str, Any]) -> Envelope:
        """Writes a request and waits for the gateway's answer, asking
        again on the next connection when the connection is lost first."""
        rid = request["id"]
        answer: asyncio.Future[Envelope] = asyncio.get_running_loop().create_future()
        self._pending[rid] = answer
        data = _dumps(request)
        try:
            while True:
                conn = await self._write(data)
                await asyncio.wait((answer, conn.lost), return_when=asyncio.FIRST_COMPLETED)
                if answer.done():
                    return answer.result()
                self._pending[rid] = answer
        finally:
            self._pending.pop(rid, None)

    async def request(self, kind: str, payload: Any = None) -> Envelope:
        """Asks the gateway something (a ``gateway/*`` kind,
        docs/protocol.md section 6: ``gateway/filter``,
        ``gateway/contexts``, ``gateway/history``, or one this client does
        not know, sent as it is) and returns the answer: the whole
        envelope whose ``correlation_id`` is the request's id
        (``answer.payload`` is what was asked). A refusal raises
        :class:`GatewayError` with the gateway's ``code``. When the
        connection is lost before the answer, the request is asked again
        on the next one. A ``gateway/filter`` answer's filter is kept
        across reconnections.
        """
        if not isinstance(kind, str) or not kind.startswith("gateway/"):
            raise ValueError(f"request is for gateway/* kinds, not {kind!r}; send other envelopes with send()")
        answer = await self._round_trip({"id": new_id(), "kind": kind, "payload": {} if payload is None else payload})
        if answer.kind == "system/error":
            raise GatewayError.from_envelope(answer)
        return answer

    async def refresh(self, token: str) -> dict[str, Any]:
        """Gives the gateway a fresh token for this connection
        (``gateway/refresh``, docs/protocol.md section 6) before the
        current one expires, and returns the answer's payload:
        ``{"participant", "capabilities", "expires"}`` (``expires`` the
        new token's end, RFC 3339, or None: never).

        The token must name the same participant. From the answer on, the
        connection has its capabilities and ends at its ``exp`` instead of
        the old one's, and the client presents it on every later
        reconnection, as ``Authorization: Bearer`` (a ``token=`` given in
        the URL's query, and an ``Authorization`` header given in
        ``headers``, are dropped). A refusal raises :class:`GatewayError`
        (``unauthorized``, whose message names the claim that failed;
        ``forbidden``; ``auth_violation`` for another participant's token;
        ``unknown_request`` on an open gateway), and the connection keeps
        its current token. When the connection is lost before the answer,
        the refresh is asked again on the next one.
        """
        if not isinstance(token, str):
            raise TypeError(f"refresh takes a token (a string), not {type(token).__name__}")
        if not token:
            raise ValueError("refresh takes a token, not an empty string")
        answer = await self.request("gateway/refresh", {"token": token})
        self._headers = [(k, v) for k, v in self._headers if k.lower() != "authorization"]
        self._headers.append(("Authorization", f"Bearer {token}"))
        self._base = without_token(self._base)
        return _answer_payload(answer)

    async def kick(self, participant: str, *, reason: str | None = None, ban_ms: int | None = None) -> dict[str, Any]:
        """Removes a participant from the pod (``gateway/kick``,
        docs/protocol.md section 6; this client needs the ``gateway/kick``
        capability) and returns the answer's payload: ``{"participant",
        "connections", "banned_until"}`` (``connections`` closed on the
        gateway node that took it; ``banned_until`` the ban's end, RFC
        3339, or None).

        Each connection of the participant is closed with 4410 and the
        reason ``kicked by YOU: REASON`` (its client raises
        :class:`KickedError`), everyone sees it leave with that reason, and
        its joins are refused (403 ``forbidden``) for ``ban_ms``
        milliseconds (None or 0: it may come back at once; at most a
        week). ``reason`` is at most 80 bytes. A refusal raises
        :class:`GatewayError` (``capability_violation``,
        ``invalid_envelope``).
        """
        if not isinstance(participant, str) or not participant:
            raise ValueError(f"kick takes a participant id, not {participant!r}")
        payload: dict[str, Any] = {"participant": participant}
        if reason is not None:
            payload["reason"] = reason
        if ban_ms is not None:
            payload["ban_ms"] = ban_ms
        return _answer_payload(await self.request("gateway/kick", payload))

    async def grant(
        self,
        recipient: str,
        capabilities: Sequence[str | Mapping[str, Any]],
        *,
        context: str | Context | None = None,
        reason: str | None = None,
    ) -> dict[str, Any]:
        """Grants capabilities to another participant
        (``capability/grant``, docs/protocol.md section 6; this client
        needs the ``capability/grant`` capability), from its next envelope
        on, and returns the gateway's answer, the payload of a
        ``system/capability``: ``{"event": "granted", "grant_id",
        "recipient", "grantor", "capabilities", ...}``. ``grant_id`` (the
        grant's envelope id) names the grant, to :meth:`revoke` it.

        ``capabilities`` are kind patterns (``"tool/*"``) or ``{"kind",
        "payload"}`` patterns. With ``context`` (an id, or what
        :meth:`branch` returned) the grant holds only in that context and
        below it, and ends when it concludes (the recipient is told with a
        ``system/capability`` ``ended``). The grant is an envelope of the
        pod sent to the recipient (``to``), who receives it. A refusal
        raises :class:`GatewayError` (``capability_violation``,
        ``invalid_context``, ``invalid_envelope``, ...). It is not sent
        again on a new connection: when the connection is lost before the
        answer, :class:`DisconnectedError` is raised (the grant may or may
        not hold).
        """
        if isinstance(capabilities, (str, bytes)) or not isinstance(capabilities, Sequence):
            raise TypeError(f"grant takes a list of capabilities, not {capabilities!r}")
        payload: dict[str, Any] = {"recipient": recipient, "capabilities": list(capabilities)}
        if context is not None:
            payload["context"] = context if isinstance(context, str) else context["id"]
        if reason is not None:
            payload["reason"] = reason
        return await self._capability_change("capability/grant", recipient, payload)

    async def revoke(
        self,
        recipient: str,
        *,
        grant_id: str | None = None,
        capabilities: Sequence[str | Mapping[str, Any]] | None = None,
        reason: str | None = None,
    ) -> dict[str, Any]:
        """Takes back what this participant granted
        (``capability/revoke``, docs/protocol.md section 6; who may grant
        may revoke): one grant (``grant_id``, from :meth:`grant`'s answer)
        or ``capabilities`` out of every grant made to ``recipient``, one
        of the two. Returns the gateway's answer, the payload of a
        ``system/capability`` ``revoked``; the recipient is told with one
        in its stream. A refusal raises :class:`GatewayError`
        (``capability_violation`` for another grantor's grant,
        ``invalid_envelope`` for a grant not in force). As :meth:`grant`,
        it is not sent again on a new connection.
        """
        if (grant_id is None) == (capabilities is None):
            raise ValueError("revoke takes grant_id or capabilities, one of them")
        payload: dict[str, Any] = {"recipient": recipient}
        if grant_id is not None:
            payload["grant_id"] = grant_id
        if capabilities is not None:
            if isinstance(capabilities, (str, bytes)) or not isinstance(capabilities, Sequence):
                raise TypeError(f"revoke takes a list of capabilities, not {capabilities!r}")
            payload["capabilities"] = list(capabilities)
        if reason is not None:
            payload["reason"] = reason
        return await self._capability_change("capability/revoke", recipient, payload)

    async def _capability_change(self, kind: str, recipient: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Sends a grant or a revoke to ``recipient`` and waits for the
        gateway's answer, a ``system/capability`` whose ``correlation_id``
        is the envelope's id. Not written again on the next connection
        once written (a second copy would be a second envelope of the
        pod): :class:`DisconnectedError` when its connection is lost
        before the answer."""
        if not isinstance(recipient, str) or not recipient:
            raise ValueError(f"{kind}: the recipient is a participant id, not {recipient!r}")
        eid = new_id()
        answer: asyncio.Future[Envelope] = asyncio.get_running_loop().create_future()
        self._pending[eid] = answer
        try:
            conn = await self._write(_dumps({"id": eid, "kind": kind, "to": [recipient], "payload": payload}))
            await asyncio.wait((answer, conn.lost), return_when=asyncio.FIRST_COMPLETED)
            if not answer.done():
                raise DisconnectedError(f"the connection was lost before the gateway answered {kind} {eid}: it may or may not have been applied")
            env = answer.result()  # raises what ended the client meanwhile
        finally:
            self._pending.pop(eid, None)
        if env.kind == "system/error":
            raise GatewayError.from_envelope(env)
        return _answer_payload(env)

    async def branch(self, type: str = "reasoning", parent: str | None = None, payload: Any = None) -> Context:
        """Opens a sub-context (docs/protocol.md section 3): sends a
        ``context/branch`` envelope with ``payload`` (``{}`` when None; the
        MCP tool sends ``{"description": ...}``) in a new context whose id
        is a new UUID, of ``type``, under ``parent`` (None for a root).
        Returns the context, to send in it (``"context": ctx``) and to
        :meth:`conclude` it."""
        ctx: Context = {"id": new_id(), "type": type}
        if parent:
            ctx["parent"] = parent
        await self.send({"kind": "context/branch", "context": dict(ctx), "payload": {} if payload is None else payload})
        return ctx

    async def conclude(self, context: str | Context, payload: Any = None) -> str:
        """Concludes a context (its id, or what :meth:`branch` returned):
        sends a ``conclusion`` envelope in it whose payload is ``payload``
        (a string ``s`` becomes ``{"summary": s}``; ``{}`` when None).
        Everyone whose filter admits the context then receives the
        conclusion and a ``system/context`` event with its statistics.
        Returns the conclusion's id once the gateway accepted it."""
        cid = context if isinstance(context, str) else context["id"]
        if payload is None:
            payload = {}
        elif isinstance(payload, str):
            payload = {"summary": payload}
        return await self.send({"kind": "conclusion", "context": {"id": cid}, "payload": payload})

    async def close(self) -> None:
        """Leaves the pod: closes the connection with a normal closure
        (1000), or stops reconnecting, and waits until the client has
        stopped. Waiting calls raise :class:`ClientClosedError`; the
        stream ends after the items already read."""
        if self._closed:
            if self._task is not None:
                await asyncio.wait((self._task,))
            return
        self._closed = True
        conn = self._conn
        if conn is not None:
            try:
                await asyncio.wait_for(conn.close(), self._open_timeout)
            except (OSError, TimeoutError, WebSocketException):
                conn.abort()
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait((self._task,))
        if self._conn is not None and self._conn is not conn:
            self._conn.abort()  # made by a reconnection while close() began
        self._end(None)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()


class Connecting:
    """What :func:`connect` returns: ``await`` it for the :class:`Client`,
    or use it with ``async with``, which closes the client at the end."""

    def __init__(self, make: Callable[[], Coroutine[Any, Any, Client]]) -> None:
        self._make = make
        self._client: Client | None = None

    def __await__(self) -> Generator[Any, None, Client]:
        return self._make().__await__()

    async def __aenter__(self) -> Client:
        client = await self._make()
        self._client = client
        return client

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._client is not None:
            await self._client.close()


def connect(
    url: str,
    *,
    pod: str,
    participant: str | None = None,
    token: str | None = None,
    filter: Mapping[str, Any] | None = None,
    history: int | str | None = None,
    resume: str | None = None,
    fold: bool | None = None,
    protocol: str | None = None,
    serves: Sequence[str] | None = None,
    observe: bool = False,
    headers: Mapping[str, str] | None = None,
    reconnect: bool = True,
    min_delay: float = DEFAULT_MIN_DELAY,
    max_delay: float = DEFAULT_MAX_DELAY,
    max_attempts: int = 0,
    open_timeout: float = DEFAULT_OPEN_TIMEOUT,
    max_size: int = DEFAULT_MAX_SIZE,
    buffer: int = DEFAULT_BUFFER,
    ssl: _ssl.SSLContext | None = None,
    ca_file: str | None = None,
) -> Connecting:
    """Joins a pod: ``client = await connect(...)`` returns once the
    gateway has welcomed the client; ``async with connect(...) as client``
    also leaves at the end.

    - ``url``: the gateway, ``ws://HOST:PORT`` or ``ws://HOST:PORT/ws``
      (``wss``, ``http`` and ``https`` too).
    - ``pod``: the pod to join. ``participant``: the participant id in
      open mode (a gateway without a token file; without it the gateway
      makes one up). ``token``: sent as ``Authorization: Bearer``; with a
      token file it names the participant.
    - ``filter``: the filter to join with, by the names of
      docs/protocol.md section 4 (``main``, ``contexts``, ``types``,
      ``exclude_types``, ``ids``, ``subtree``, ``conclusions``,
      ``routing``, ``echo``, ``batch``); lists as lists or as the wire's
      comma-separated strings.
    - ``history``: the pod's past to replay after the welcome, a number
      of envelopes or ``"all"``, folded unless ``fold=False``; the first
      connection alone asks for it, reconnections resume.
    - ``resume``: the id of the last envelope a previous client received;
      the welcome's ``history.resumed`` says whether the gateway could.
    - ``serves``: what the participant answers requests of,
      ``["mcp"]`` (:data:`SERVES_MCP`, the one value the gateway takes)
      for an MCP server in the pod: welcomes and presence events then show
      ``"serves": ["mcp"]`` in its identity. Another value is refused
      (400 ``invalid_filter``).
    - ``observe``: True watches the pod without being present: no
      presence event, no place in welcomes or participant lists. It needs
      the ``gateway/observe`` capability; without it the gateway refuses
      the upgrade (:class:`RefusedError`, 403 ``forbidden``).
    - Every connection sends ``serves`` and ``observe``, reconnections
      included.
    - ``reconnect``, ``min_delay``, ``max_delay``, ``max_attempts`` (0:
      no end): what to do when the connection is lost. ``open_timeout``
      bounds each dial up to the welcome, ``max_size`` the largest
      message read, ``buffer`` the items read ahead of the stream.
    - ``ca_file``: for a ``wss://`` gateway whose certificate a private CA
      signed, a PEM file of CA certificates trusted besides the system's
      roots (which OpenSSL reads from ``SSL_CERT_FILE`` when it is set).
      ``ssl``: an :class:`ssl.SSLContext` of your own instead.

    A refused upgrade raises :class:`RefusedError` (``status``,
    ``code``); ``connect`` does not retry. A certificate that is not
    trusted raises :class:`ssl.SSLCertVerificationError`.
    """
    checked_history = _check_history(history)
    query = filter_query(filter or {})
    base = base_url(url, pod, participant, protocol, serves, observe)
    hdrs = list((headers or {}).items())
    if token:
        hdrs.append(("Authorization", f"Bearer {token}"))
    if buffer < 1:
        raise ValueError(f"buffer is at least 1, not {buffer}")
    context = client_context(ssl, ca_file)

    async def make() -> Client:
        client = Client(
            base=base,
            headers=hdrs,
            filter=query,
            resume=resume or None,
            reconnect=reconnect,
            min_delay=min_delay,
            max_delay=max_delay,
            max_attempts=max_attempts,
            open_timeout=open_timeout,
            max_size=max_size,
            buffer=buffer,
            ssl_context=context,
        )
        await client._start(checked_history, fold)
        return client

    return Connecting(make)

