"""Trace context: ``send(traceparent=...)`` puts the caller's trace in the
envelope's ``trace`` field; the gateway continues it in its own spans and
relays it; the receiver gets it with the envelope. The gateway traces to
its standard output here (OTEL_TRACES_EXPORTER=console), which the test
reads. The OpenTelemetry API is not installed here (PyPI is out of reach,
Debian packages none): its path is the TypeScript and Go clients' tests'."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

import mcpp

from helpers import next_of

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{SPAN_ID}-01"


async def gateway_span(log: str, name: str, parent: str) -> dict:
    """The gateway's span named ``name`` under ``parent``, from its console
    exporter's lines in its log."""
    deadline = time.monotonic() + 10
    while True:
        with open(log, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("{"):
                    span = json.loads(line)
                    if span.get("Name") == name and span.get("Parent", {}).get("SpanID") == parent:
                        return span
        if time.monotonic() > deadline:
            raise AssertionError(f"no span {name} under {parent} in the gateway's log")
        await asyncio.sleep(0.05)


async def test_traceparent_travels_and_the_gateway_continues_it(traced_gateway) -> None:
    pod = f"trace-{time.monotonic_ns()}"
    async with mcpp.connect(traced_gateway.url, pod=pod, participant="bob") as bob, \
            mcpp.connect(traced_gateway.url, pod=pod, participant="alice") as alice:
        await next_of(bob, "system/welcome")
        await alice.send({"kind": "chat", "payload": {"text": "traced"}}, traceparent=TRACEPARENT, tracestate="ts=1")
        got = await next_of(bob, "chat")
        assert got.trace == {"traceparent": TRACEPARENT, "tracestate": "ts=1"}
        span = await gateway_span(str(traced_gateway.log), f"accept {pod}", SPAN_ID)
        assert span["SpanContext"]["TraceID"] == TRACE_ID

        # Without one, the receiver gets the gateway's span: its trace goes on.
        await alice.send({"kind": "chat"})
        filled = await next_of(bob, "chat")
        assert mcpp.valid_traceparent(filled.trace["traceparent"])
        assert filled.trace["traceparent"][3:35] != TRACE_ID

        # The envelope's own trace is sent as it is.
        await alice.send({"kind": "chat", "trace": {"traceparent": TRACEPARENT}}, traceparent=f"00-{'1' * 32}-{'2' * 16}-01")
        assert (await next_of(bob, "chat")).trace == {"traceparent": TRACEPARENT}

        with pytest.raises(ValueError):
            await alice.send({"kind": "chat"}, traceparent=TRACEPARENT.upper())


def test_context_of() -> None:
    """A received trace as the parent of the receiving code's spans: with
    the OpenTelemetry API, a context holding the remote span; without it,
    None."""
    env = mcpp.Envelope({"kind": "chat", "trace": {"traceparent": TRACEPARENT}})
    ctx = mcpp.context_of(env)
    if not mcpp.OPENTELEMETRY:
        assert ctx is None
        return
    from opentelemetry import trace

    sc = trace.get_current_span(ctx).get_span_context()
    assert (format(sc.trace_id, "032x"), format(sc.span_id, "016x"), sc.is_remote) == (TRACE_ID, SPAN_ID, True)
