package tracing

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/mcpp/gateway/envelope"
)

// SpanContext is the remote span context an envelope's trace context
// names (tc from a frame or a traceparent, state its tracestate, "" for
// none); not valid when tc is not.
func SpanContext(tc envelope.TraceContext, state string) trace.SpanContext {
	if !tc.Valid() {
		return trace.SpanContext{}
	}
	cfg := trace.SpanContextConfig{TraceID: tc.TraceID, SpanID: tc.SpanID, TraceFlags: trace.TraceFlags(tc.Flags), Remote: true}
	if state != "" {
		// A copy: an envelope's tracestate is its sender's read buffer,
		// which the span outlives.
		if ts, err := trace.ParseTraceState(strings.Clone(state)); err == nil {
			cfg.TraceState = ts
		}
	}
	return trace.NewSpanContext(cfg)
}

// Remote is ctx with the remote parent an envelope's traceparent and
// tracestate name; ctx unchanged when the traceparent is not valid.
func Remote(ctx context.Context, traceparent, tracestate string) context.Context {
	tc, ok := envelope.ParseTraceparent(traceparent)
	if !ok {
		return ctx
	}
	if tracestate != "" && !envelope.ValidTracestate(tracestate) {
		tracestate = ""
	}
	return trace.ContextWithRemoteSpanContext(ctx, SpanContext(tc, tracestate))
}

// Of is a span context as a frame carries it.
func Of(sc trace.SpanContext) envelope.TraceContext {
	if !sc.IsValid() {
		return envelope.TraceContext{}
	}
	return envelope.TraceContext{TraceID: sc.TraceID(), SpanID: sc.SpanID(), Flags: byte(sc.TraceFlags())}
}

// Traceparent and Tracestate write a span context as an envelope's trace
// field holds it ("" when it is not valid).
func Traceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	return Of(sc).Traceparent()
}

// Tracestate is sc's tracestate as W3C writes it.
func Tracestate(sc trace.SpanContext) string { return sc.TraceState().String() }
