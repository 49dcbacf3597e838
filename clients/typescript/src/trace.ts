// W3C trace context on envelopes (docs/protocol.md section 1, "Trace
// context"): what send puts in an envelope's trace field, and how the
// receiving code continues a received one. @opentelemetry/api is used
// when it is installed (an optional peer dependency), never required.

import type { Envelope, Trace } from "./types.js";

/** A version 00 traceparent, as the gateway takes it. */
const TRACEPARENT = /^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$/;

/** What this client uses of @opentelemetry/api. */
interface OpenTelemetryAPI {
  trace: {
    getActiveSpan(): { spanContext(): SpanContext } | undefined;
    setSpanContext(context: unknown, spanContext: SpanContext): unknown;
  };
  context: { active(): unknown };
  createTraceState?(raw?: string): unknown;
}

interface SpanContext {
  traceId: string;
  spanId: string;
  traceFlags: number;
  isRemote?: boolean;
  traceState?: { serialize(): string } | unknown;
}

/** @opentelemetry/api once looked for: the module, or null when it is not installed. */
let otel: OpenTelemetryAPI | null | undefined;

/**
 * Looks for @opentelemetry/api, once per process: connect does, so that
 * send finds the active span without waiting.
 */
export async function loadOpenTelemetry(): Promise<void> {
  if (otel !== undefined) return;
  try {
    // A name in a variable: bundlers leave an optional dependency alone.
    const name = "@opentelemetry/api";
    otel = (await import(name)) as OpenTelemetryAPI;
  } catch {
    otel = null;
  }
}

/** Reports whether s is a traceparent the gateway relays (version 00, lower-case hex, no id of zeros). */
export function validTraceparent(s: unknown): s is string {
  return typeof s === "string" && TRACEPARENT.test(s);
}

/**
 * The trace an envelope is sent with: its own trace field; else the
 * traceparent (and tracestate) given; else the active OpenTelemetry
 * span's, when @opentelemetry/api is installed and a span is active;
 * else none.
 */
export function traceFor(envelope: Envelope, traceparent?: string, tracestate?: string): Trace | undefined {
  if (envelope.trace !== undefined) return undefined; // the sender's own, sent as it is
  if (traceparent !== undefined) {
    if (!validTraceparent(traceparent)) {
      throw new TypeError(`send: traceparent ${JSON.stringify(traceparent)} is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>, lower case)`);
    }
    return tracestate ? { traceparent, tracestate } : { traceparent };
  }
  return activeTrace();
}

/** The active OpenTelemetry span's trace context, or undefined. */
export function activeTrace(): Trace | undefined {
  const sc = otel?.trace.getActiveSpan()?.spanContext();
  if (sc === undefined) return undefined;
  const traceparent = `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, "0")}`;
  if (!validTraceparent(traceparent)) return undefined;
  const state = typeof (sc.traceState as { serialize?: unknown })?.serialize === "function"
    ? (sc.traceState as { serialize(): string }).serialize() : "";
  return state ? { traceparent, tracestate: state } : { traceparent };
}

/**
 * The OpenTelemetry context (of @opentelemetry/api) whose remote parent
 * is the span a received envelope's trace names: the parent of what the
 * receiving code does about it (`tracer.startActiveSpan("handle", {},
 * contextOf(envelope), …)`). The active context when the envelope
 * carries no trace; undefined when @opentelemetry/api is not installed.
 */
export function contextOf(envelope: Envelope): unknown {
  if (!otel) return undefined;
  const active = otel.context.active();
  const tp = envelope.trace?.traceparent;
  if (!validTraceparent(tp)) return active;
  const [, traceId, spanId, flags] = tp.split("-") as [string, string, string, string];
  const sc: SpanContext = { traceId, spanId, traceFlags: parseInt(flags, 16), isRemote: true };
  if (envelope.trace?.tracestate && otel.createTraceState) sc.traceState = otel.createTraceState(envelope.trace.tracestate);
  return otel.trace.setSpanContext(active, sc);
}
