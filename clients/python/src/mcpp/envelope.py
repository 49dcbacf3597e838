"""The envelope: one JSON object of a pod (docs/protocol.md section 2).

An :class:`Envelope` is a ``dict`` holding the envelope exactly as it was
on the wire, field names unchanged (``env["from"]``, ``env["kind"]``),
whose fields also read as attributes (``env.from_``, ``env.kind``). It is
what the client's stream yields; :meth:`mcpp.Client.send` takes it or any
plain ``dict``.
"""

from __future__ import annotations

import uuid
from typing import Any, NotRequired, TypedDict

__all__ = ["Context", "Envelope", "new_id"]


class Context(TypedDict):
    """A sub-context in the object form of docs/protocol.md section 3, as
    :meth:`mcpp.Client.branch` returns it: put it as an envelope's
    ``context`` to send in it."""

    id: str
    type: NotRequired[str]
    parent: NotRequired[str]


def new_id() -> str:
    """A new envelope id: a UUIDv4, as the gateway would fill in."""
    return str(uuid.uuid4())


class Envelope(dict[str, Any]):
    """One envelope, as the gateway sent it: a ``dict`` whose fields also
    read as attributes. A field that is absent reads as ``None``
    (``payload``, ``context``, ``to``, ...). ``from`` is a keyword of
    Python, so it reads as ``from_``. ``to_dict()`` (or ``dict(env)``) is a
    plain copy; ``json.dumps(env)`` writes it back as it came.
    """

    __slots__ = ()

    @property
    def protocol(self) -> str | None:
        """``mcpp/v0.1`` or ``mcpx/v0.1``."""
        return self.get("protocol")

    @property
    def id(self) -> str | None:
        """The envelope's id, unique in the pod's history."""
        return self.get("id")

    @property
    def ts(self) -> str | None:
        """When the gateway accepted it (RFC 3339, milliseconds, UTC), or
        what the sender wrote."""
        return self.get("ts")

    @property
    def from_(self) -> str | None:
        """The sender's participant id (``system:gateway`` for the
        gateway's own messages)."""
        return self.get("from")

    @property
    def to(self) -> list[str] | None:
        """The participants it is addressed to; ``None`` (or empty) for
        everyone."""
        return self.get("to")

    @property
    def kind(self) -> str:
        """What it is: ``chat``, ``system/presence``, ``conclusion``, ..."""
        return str(self.get("kind", ""))

    @property
    def correlation_id(self) -> str | list[str] | None:
        """What it answers or refers to, as sent (a string or a list)."""
        return self.get("correlation_id")

    @property
    def context(self) -> dict[str, Any] | str | None:
        """Its sub-context: an object (``{"id", "type"?, "parent"?,
        "metadata"?}``) or a path (``"task-1/plan"``)."""
        return self.get("context")

    @property
    def context_id(self) -> str | None:
        """The id of its sub-context (a path is its own id), or ``None``
        in the main context."""
        ctx = self.get("context")
        if isinstance(ctx, dict):
            cid = ctx.get("id")
            return cid if isinstance(cid, str) else None
        return ctx if isinstance(ctx, str) else None

    @property
    def payload(self) -> Any:
        """Any JSON value; the gateway never looks into it."""
        return self.get("payload")

    @property
    def trace(self) -> dict[str, str] | None:
        """The W3C trace context it continues (``{"traceparent", "tracestate"}``):
        its sender's, or the gateway's span; :func:`mcpp.context_of` makes
        it the parent of the receiving code's spans."""
        return self.get("trace")

    @property
    def lifecycle(self) -> dict[str, Any] | None:
        """How history keeps it (docs/protocol.md section 8)."""
        return self.get("lifecycle")

    @property
    def is_system(self) -> bool:
        """Whether the gateway wrote it (a ``system/*`` kind)."""
        return self.kind.startswith("system/")

    def to_dict(self) -> dict[str, Any]:
        """A plain ``dict`` copy of the envelope."""
        return dict(self)

    def __repr__(self) -> str:
        return f"Envelope({dict.__repr__(self)})"
