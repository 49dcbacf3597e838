"""The errors of the client, one class for each way the gateway says no.

Every error of this package is an :class:`MCPPError`. Those that come from
the gateway carry what it said:

- :class:`RefusedError`: an HTTP refusal of the upgrade or of a publish
  request (docs/protocol.md sections 1 and 6), with its ``status`` (400,
  401, 403, 503, ...) and ``code`` (``"unauthorized"``, ...).
- :class:`GatewayError`: a ``system/error``, the gateway's refusal of one
  envelope or request (section 5), with its ``code``
  (``"capability_violation"``, ...).
- :class:`ClosedError`: the gateway closed the connection with a close
  code (section 5), its ``code`` (4000, 4008, ...) and ``reason``; for the
  codes that end a participant's stay, its subclasses
  :class:`TokenExpiredError` (4401), :class:`RevokedError` (4403) and
  :class:`KickedError` (4410).

The others are the client's own: :class:`DisconnectedError` (the
connection was lost and the client does not reconnect),
:class:`ClientClosedError` (the client was closed) and
:class:`ProtocolError` (the gateway said something that is not the
protocol).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .envelope import Envelope

__all__ = [
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
    "ClientClosedError",
    "ClosedError",
    "DisconnectedError",
    "GatewayError",
    "KickedError",
    "MCPPError",
    "ProtocolError",
    "RefusedError",
    "RevokedError",
    "TokenExpiredError",
]

# The close codes of the gateway (docs/protocol.md section 5, wire.CloseCode).
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001  # the gateway is shutting down: reconnect
CLOSE_MESSAGE_TOO_BIG = 1009  # a message over twice max_message_bytes
CLOSE_INTERNAL_ERROR = 1011  # the replay was interrupted: resume again
CLOSE_REPLACED = 4000  # another connection took this participant id
CLOSE_SLOW_CONSUMER = 4008  # the gateway's send queue for us filled
CLOSE_TOKEN_EXPIRED = 4401  # the token expired and was not refreshed: do not reconnect
CLOSE_REVOKED = 4403  # the token was revoked: do not reconnect
CLOSE_KICKED = 4410  # a moderator removed us (gateway/kick): do not reconnect
CLOSE_ORDER_LOST = 4503  # the gateway node lost the pod's order: reconnect and resume

# The close codes after which the client does not reconnect: another
# connection took the participant id, or the gateway wants this one gone.
_FINAL = frozenset((CLOSE_REPLACED, CLOSE_TOKEN_EXPIRED, CLOSE_REVOKED, CLOSE_KICKED))

_CLOSE_MEANINGS = {
    CLOSE_NORMAL: "normal closure",
    CLOSE_GOING_AWAY: "the gateway is shutting down",
    CLOSE_MESSAGE_TOO_BIG: "a message was over twice the gateway's size limit",
    CLOSE_INTERNAL_ERROR: "the gateway could not read the pod's history",
    CLOSE_REPLACED: "another connection joined the pod with the same participant id",
    CLOSE_SLOW_CONSUMER: "this connection read too slowly and the gateway's send queue for it filled",
    CLOSE_TOKEN_EXPIRED: "the token expired and was not refreshed",
    CLOSE_REVOKED: "the token was revoked",
    CLOSE_KICKED: "removed from the pod by a moderator",
    CLOSE_ORDER_LOST: "the gateway node lost the pod's order",
}


class MCPPError(Exception):
    """The base of every error this package raises."""


class RefusedError(MCPPError):
    """The gateway refused an upgrade or a publish request with an HTTP
    answer (docs/protocol.md sections 1 and 6).

    ``status`` is the HTTP status, ``code`` the JSON body's ``error``
    (``"invalid_pod"``, ``"unauthorized"``, ...; ``None`` when the body
    was not the gateway's JSON, such as a proxy's page) and ``message``
    the body's ``message`` (or the body itself).
    """

    def __init__(self, status: int, code: str | None, message: str, *, publish: bool = False) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.publish = publish
        what = "request" if publish else "connection"
        text = f"the gateway refused the {what}: HTTP {status}"
        if code:
            text += f" {code}"
        if message:
            text += f": {message}"
        super().__init__(text)

    @property
    def temporary(self) -> bool:
        """Whether the same request may succeed later: 503 (a cap that
        frees up, a gateway that drains or starts), other server errors
        and 429. A refusal of the request itself (400, 401, 403) is not."""
        return self.status >= 500 or self.status == 429

    @classmethod
    def from_body(cls, status: int, body: bytes, *, publish: bool = False) -> RefusedError:
        """The refusal of an HTTP answer whose body is ``body``: the
        gateway's ``{"error": CODE, "message": TEXT}``, or anything else,
        kept as the message."""
        code: str | None = None
        message = body.decode("utf-8", "replace").strip()
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), str) and parsed["error"]:
            code = parsed["error"]
            message = str(parsed.get("message", ""))
        return cls(status, code, message[:1000], publish=publish)


class GatewayError(MCPPError):
    """A ``system/error``: the gateway refused an envelope or a request,
    did not relay it, and kept the connection open (docs/protocol.md
    section 5).

    ``code`` is the wire's code (``"capability_violation"``,
    ``"rate_limited"``, ...), ``message`` its text, ``retryable`` whether
    the same envelope may pass later (after ``retry_after_ms``), and
    ``payload`` the whole payload with the details
    (``attempted_kind``, ``your_capabilities``, ...). ``refused_id`` is the
    id of the envelope it is about, and ``envelope`` the ``system/error``
    itself, when it came over a connection.
    """

    def __init__(self, payload: dict[str, Any], *, refused_id: str | None = None, envelope: Envelope | None = None) -> None:
        self.payload = payload
        self.code: str = str(payload.get("error", ""))
        self.message: str = str(payload.get("message", ""))
        self.retryable: bool = bool(payload.get("retryable", False))
        retry = payload.get("retry_after_ms")
        self.retry_after_ms: int | None = retry if isinstance(retry, int) else None
        self.refused_id = refused_id
        self.envelope = envelope
        about = f"envelope {refused_id}" if refused_id else "an envelope"
        super().__init__(f"the gateway refused {about}: {self.code}: {self.message}")

    @classmethod
    def from_envelope(cls, envelope: Envelope) -> GatewayError:
        """The error a ``system/error`` envelope says: what to raise for
        one that came in the stream, about an envelope you sent."""
        payload = envelope.get("payload")
        if not isinstance(payload, dict):
            payload = {}
        corr = envelope.get("correlation_id")
        if isinstance(corr, list):
            corr = corr[0] if corr else None
        return cls(payload, refused_id=corr if isinstance(corr, str) else None, envelope=envelope)


class ClosedError(MCPPError):
    """The gateway closed the connection with a close code
    (docs/protocol.md section 5): ``code`` (an int: 4000 replaced, 4008
    slow consumer, 1001 going away, ...) and ``reason``, the close frame's
    words.

    The client reconnects after every code but 4000, 4401, 4403 and 4410
    (``final``), so this ends the client (from its stream, ``send`` and
    ``request``) only for those, or for any code when it was told not to
    reconnect. 4401, 4403 and 4410 come as their subclasses,
    :class:`TokenExpiredError`, :class:`RevokedError` and
    :class:`KickedError` (:meth:`of` makes the right one).
    """

    def __init__(self, code: int, reason: str = "") -> None:
        self.code = code
        self.reason = reason
        text = f"the gateway closed the connection: close {code}"
        meaning = _CLOSE_MEANINGS.get(code)
        if meaning:
            text += f" ({meaning})"
        if reason:
            text += f": {reason}"
        super().__init__(text)

    @property
    def replaced(self) -> bool:
        """Whether another connection joined with the same participant id
        (4000)."""
        return self.code == CLOSE_REPLACED

    @property
    def final(self) -> bool:
        """Whether the client must not reconnect after this code: 4000
        (another connection is this participant: the two would replace
        each other forever), 4401, 4403 and 4410 (the gateway wants this
        participant's connection gone)."""
        return self.code in _FINAL

    @classmethod
    def of(cls, code: int, reason: str = "") -> ClosedError:
        """The error of a connection closed with ``code``: the subclass of
        its code, or a plain :class:`ClosedError`."""
        sub = {CLOSE_TOKEN_EXPIRED: TokenExpiredError, CLOSE_REVOKED: RevokedError, CLOSE_KICKED: KickedError}.get(code, ClosedError)
        return sub(code, reason)


class TokenExpiredError(ClosedError):
    """4401: the connection's token expired and no fresh one came first
    (:meth:`mcpp.Client.refresh`). The client does not reconnect with the
    expired token: connect again with a fresh one (and ``resume``)."""


class RevokedError(ClosedError):
    """4403: the token was revoked (gone from the gateway's token file, or
    its pods no longer allow the pod). The client does not reconnect: the
    token would be refused."""


class KickedError(ClosedError):
    """4410: a participant holding ``gateway/kick`` removed this one from
    the pod; ``reason`` says who and why (``"kicked by mod: looping"``).
    The client does not reconnect: the kick may come with a ban, and would
    mean nothing if the client came straight back."""


class DisconnectedError(MCPPError):
    """The connection was lost without a close code (the network, a
    proxy, a crash) and the client does not reconnect: it was told not to,
    or it gave up (see ``__cause__`` for the last failure)."""


class ClientClosedError(MCPPError):
    """The client was closed (:meth:`mcpp.Client.close`), before or while
    the call waited."""


class ProtocolError(MCPPError):
    """The gateway said something that is not the protocol: a first
    message that is not a ``system/welcome``, an answer that does not
    read."""
