"""W3C trace context on envelopes (docs/protocol.md section 1, "Trace
context"): what :meth:`Client.send` puts in an envelope's ``trace``
field, and how the receiving code continues a received one.

``opentelemetry-api`` is used when it is importable (an optional
dependency: ``pip install mcpp[otel]``), never required.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

try:  # optional: the OpenTelemetry API, when installed
    from opentelemetry import context as _otel_context
    from opentelemetry import trace as _otel_trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator as _W3C
except ImportError:  # pragma: no cover - depends on the environment
    _otel_trace = None  # type: ignore[assignment]
    _otel_context = None  # type: ignore[assignment]
    _W3C = None  # type: ignore[assignment,misc]

__all__ = ["valid_traceparent", "trace_for", "active_trace", "context_of", "OPENTELEMETRY"]

#: Whether the OpenTelemetry API was found (``opentelemetry-api``).
OPENTELEMETRY = _otel_trace is not None

_TRACEPARENT = re.compile(r"^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$")


def valid_traceparent(value: Any) -> bool:
    """Whether ``value`` is a traceparent the gateway relays: version 00,
    lower-case hex, no id of zeros."""
    return isinstance(value, str) and _TRACEPARENT.match(value) is not None


def active_trace() -> dict[str, str] | None:
    """The trace field of the active OpenTelemetry span (``opentelemetry-api``
    installed and a span active), or ``None``."""
    if _W3C is None:
        return None
    carrier: dict[str, str] = {}
    _W3C().inject(carrier)
    tp = carrier.get("traceparent")
    if not valid_traceparent(tp):
        return None
    out = {"traceparent": tp}
    if carrier.get("tracestate"):
        out["tracestate"] = carrier["tracestate"]
    return out


def trace_for(envelope: Mapping[str, Any], traceparent: str | None = None, tracestate: str | None = None) -> dict[str, str] | None:
    """The trace field to send ``envelope`` with: ``None`` when it has one
    (sent as it is); else ``traceparent`` (and ``tracestate``) when given;
    else the active OpenTelemetry span's; else ``None``."""
    if "trace" in envelope:
        return None
    if traceparent is not None:
        if not valid_traceparent(traceparent):
            raise ValueError(f"traceparent {traceparent!r} is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>, lower case)")
        return {"traceparent": traceparent, **({"tracestate": tracestate} if tracestate else {})}
    return active_trace()


def context_of(envelope: Mapping[str, Any]) -> Any:
    """The OpenTelemetry context whose remote parent is the span a received
    envelope's ``trace`` names: the parent of what the receiving code does
    about it (``tracer.start_as_current_span("handle", context=context_of(env))``).
    The current context when it carries none; ``None`` without
    ``opentelemetry-api``."""
    if _W3C is None or _otel_context is None:
        return None
    trace = envelope.get("trace")
    if not isinstance(trace, Mapping) or not valid_traceparent(trace.get("traceparent")):
        return _otel_context.get_current()
    carrier = {"traceparent": trace["traceparent"]}
    if isinstance(trace.get("tracestate"), str):
        carrier["tracestate"] = trace["tracestate"]
    return _W3C().extract(carrier)
