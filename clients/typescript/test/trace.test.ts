// Trace context: send puts the caller's trace (an option, or the active
// span of @opentelemetry/api) in the envelope's trace field; the gateway
// continues it in its own spans and relays it; the receiver gets it with
// the envelope and continues it (contextOf). The gateway traces to its
// standard output here (OTEL_TRACES_EXPORTER=console), which the test
// reads.

import assert from "node:assert/strict";
import { test } from "node:test";

import { context, trace, TraceFlags } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";

import { connect, contextOf, type Envelope } from "@mcpp/client";

import { podName, Reader, startGateway, type Gateway } from "./gateway.js";

const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
const spanId = "00f067aa0ba902b7";
const traceparent = `00-${traceId}-${spanId}-01`;

/** The gateway's span named name whose parent is parentSpanId, from its console exporter's lines. */
async function gatewaySpan(gw: Gateway, name: string, parentSpanId: string): Promise<Record<string, any>> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    for (const line of gw.log().split("\n")) {
      if (!line.startsWith("{")) continue;
      const span = JSON.parse(line) as Record<string, any>;
      if (span["Name"] === name && span["Parent"]?.["SpanID"] === parentSpanId) return span;
    }
    if (Date.now() > deadline) throw new Error(`no span ${name} under ${parentSpanId} in the gateway's output:\n${gw.log()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test("a traceparent given to send travels with the envelope, and the gateway's span continues it", async (t) => {
  const gw = await startGateway(t, [], { OTEL_TRACES_EXPORTER: "console", OTEL_BSP_SCHEDULE_DELAY: "50" });
  const pod = podName();
  const bob = await connect(gw.ws, { pod, participant: "bob" });
  t.after(() => bob.close());
  const alice = await connect(gw.ws, { pod, participant: "alice" });
  t.after(() => alice.close());
  const r = new Reader(bob);
  await r.kind("system/welcome");

  await alice.send({ kind: "chat", payload: { text: "traced" } }, { traceparent, tracestate: "ts=1" });
  const got = await r.envelope();
  assert.deepEqual(got.trace, { traceparent, tracestate: "ts=1" }, "relayed as sent");
  const accept = await gatewaySpan(gw, `accept ${pod}`, spanId);
  assert.equal(accept["SpanContext"]["TraceID"], traceId);

  // Without one, the receiver gets the gateway's span: its trace goes on.
  await alice.send({ kind: "chat" });
  const filled = await r.envelope();
  assert.match(filled.trace?.traceparent ?? "", /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
  assert.notEqual(filled.trace?.traceparent.slice(3, 35), traceId);

  await assert.rejects(alice.send({ kind: "chat" }, { traceparent: traceparent.toUpperCase() }), TypeError);
});

test("the active span of @opentelemetry/api is sent, and contextOf continues a received trace", async (t) => {
  const manager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(manager);
  t.after(() => context.disable());
  const gw = await startGateway(t);
  const pod = podName();
  const bob = await connect(gw.ws, { pod, participant: "bob" });
  t.after(() => bob.close());
  const alice = await connect(gw.ws, { pod, participant: "alice" });
  t.after(() => alice.close());
  const r = new Reader(bob);
  await r.kind("system/welcome");

  // A span of the caller's (here a remote one made active: the API alone
  // records nothing, and a real SDK's span behaves the same).
  const span = trace.wrapSpanContext({ traceId, spanId, traceFlags: TraceFlags.SAMPLED, isRemote: false });
  await context.with(trace.setSpan(context.active(), span), () => alice.send({ kind: "chat", payload: 1 }));
  const got: Envelope = await r.envelope();
  assert.equal(got.trace?.traceparent, traceparent);

  const parent = trace.getSpanContext(contextOf(got) as ReturnType<typeof context.active>);
  assert.equal(parent?.traceId, traceId);
  assert.equal(parent?.spanId, spanId);
  assert.equal(parent?.isRemote, true);
});
