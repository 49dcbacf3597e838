"""Publishing without joining: ``POST /pods/NAME/envelopes``
(docs/protocol.md section 6), for a tool, a webhook or a script that only
has something to say, or to ask, and need not be seen joining and
leaving."""

from __future__ import annotations

import asyncio
import json
import ssl as _ssl
import urllib.parse
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

from . import _http
from ._tls import client_context
from .envelope import new_id
from .errors import GatewayError, ProtocolError, RefusedError

__all__ = ["publish", "publish_url", "result_error"]

DEFAULT_TIMEOUT = 30.0  # seconds for the whole request
DEFAULT_MAX_SIZE = 64 << 20  # the largest answer read


def publish_url(url: str, pod: str, participant: str | None = None) -> str:
    """The URL of ``POST /pods/NAME/envelopes`` on the gateway of ``url``:
    its base (``http://HOST:PORT``) or its WebSocket URL
    (``ws://HOST:PORT/ws``); a path before ``/ws`` and the query are
    kept."""
    if not isinstance(pod, str) or not pod:
        raise ValueError("pod is required")
    u = urllib.parse.urlsplit(url)
    scheme = {"http": "http", "https": "https", "ws": "http", "wss": "https"}.get(u.scheme)
    if scheme is None or not u.netloc:
        raise ValueError(f"the gateway's URL {url!r}: it must be http://HOST:PORT (or https, ws, wss)")
    prefix = u.path.rstrip("/")
    if prefix.endswith("/ws"):
        prefix = prefix[: -len("/ws")]
    path = f"{prefix}/pods/{urllib.parse.quote(pod, safe='')}/envelopes"
    query = [(k, v) for k, v in urllib.parse.parse_qsl(u.query, keep_blank_values=True) if k != "participant"]
    if participant:
        query.append(("participant", participant))
    return urllib.parse.urlunsplit((scheme, u.netloc, path, urllib.parse.urlencode(query), ""))


async def publish(
    url: str,
    envelopes: Mapping[str, Any] | Iterable[Mapping[str, Any]],
    *,
    pod: str,
    participant: str | None = None,
    token: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    max_size: int = DEFAULT_MAX_SIZE,
    ssl: _ssl.SSLContext | None = None,
    ca_file: str | None = None,
) -> list[dict[str, Any]]:
    """Sends envelopes to a pod without joining it, in one HTTP request,
    and returns one result per envelope, in order.

    Each envelope is checked and relayed as if the participant had sent it
    over WebSocket: the same rules, codes, capabilities and rate buckets.
    An envelope without an ``id`` gets a UUIDv4, written into it as
    :meth:`mcpp.Client.send` does. ``participant`` is required in open
    mode; with a token file the ``token`` names the participant.

    A result is ``{"id": ID}`` for an envelope relayed, ``{"id": ID,
    "answer": PAYLOAD}`` for a ``gateway/contexts`` or ``gateway/history``
    request, or the refusal, the ``system/error`` payload (``{"error":
    CODE, "message": ..., "id"?: ID}``): :func:`result_error` makes it a
    :class:`GatewayError`. A refused envelope does not make ``publish``
    fail; a request refused as a whole (401, 403, 400 ``invalid_pod``,
    503, ...) raises :class:`RefusedError`.

    An ``https://`` (or ``wss://``) gateway's certificate is checked
    against the system's roots, plus the CA certificates of the PEM file
    ``ca_file`` when given; ``ssl`` is an :class:`ssl.SSLContext` of your
    own instead. One that is not trusted raises
    :class:`ssl.SSLCertVerificationError`.
    """
    envs = [envelopes] if isinstance(envelopes, Mapping) else list(envelopes)
    if not envs:
        raise ValueError("no envelope to publish")
    lines: list[bytes] = []
    for i, env in enumerate(envs):
        if not isinstance(env, Mapping):
            raise TypeError(f"envelope {i} is a {type(env).__name__}, not a dict")
        if not env.get("id"):
            eid = new_id()
            if isinstance(env, MutableMapping):
                env["id"] = eid
            else:
                env = {**env, "id": eid}
        lines.append(json.dumps(env, ensure_ascii=False, separators=(",", ":")).encode())
    if len(lines) == 1:
        body, content_type = lines[0], "application/json"
    else:
        body, content_type = b"\n".join(lines) + b"\n", "application/x-ndjson"
    hdrs = dict(headers or {})
    hdrs["Content-Type"] = content_type
    hdrs["Accept"] = "application/json"
    if token:
        hdrs["Authorization"] = f"Bearer {token}"
    context = client_context(ssl, ca_file)
    async with asyncio.timeout(timeout):
        status, data = await _http.request("POST", publish_url(url, pod, participant), hdrs, body, limit=max_size, ssl_context=context)
    if status != 200:
        raise RefusedError.from_body(status, data[:4096], publish=True)
    if len(data) > max_size:
        raise ProtocolError(f"the gateway's answer is over {max_size} bytes (max_size)")
    try:
        answer = json.loads(data)
    except ValueError as exc:
        raise ProtocolError(f"the gateway's answer does not read: {data[:200]!r}") from exc
    results = answer.get("results") if isinstance(answer, dict) else None
    if not isinstance(results, list) or len(results) != len(envs):
        raise ProtocolError(f"the gateway answered {data[:200]!r} for {len(envs)} envelopes")
    return results


def result_error(result: Mapping[str, Any]) -> GatewayError | None:
    """The refusal of one result of :func:`publish` as a
    :class:`GatewayError` (its ``refused_id`` is the envelope's id), or
    ``None`` when the envelope was relayed or answered."""
    if "error" not in result:
        return None
    rid = result.get("id")
    return GatewayError(dict(result), refused_id=rid if isinstance(rid, str) else None)
