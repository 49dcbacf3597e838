package client

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpp/gateway/wire"
)

// Trace context (docs/protocol.md section 1, "Trace context"): Send puts
// the span ctx carries into an envelope that has no Trace, through
// OpenTelemetry's W3C propagator, so that the gateway, the recipients and
// an MCP server behind mcpp bridge continue the caller's trace; a
// received envelope's Trace is the trace its sender (or the gateway)
// gave it, which ContextOf turns back into a context for the receiving
// code's spans:
//
//	ctx, span := tracer.Start(ctx, "plan")
//	c.Send(ctx, env) // env.Trace: the span's traceparent
//	...
//	case *client.Message:
//		ctx, span := tracer.Start(client.ContextOf(ctx, ev.Envelope), "handle "+ev.Kind)

// w3c is W3C Trace Context, the wire's format of trace context.
var w3c propagation.TraceContext

// withTrace sets env.Trace from the span ctx carries, unless env has a
// Trace already or ctx carries none.
func withTrace(ctx context.Context, env *wire.Envelope) {
	if env.Trace != nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	c := propagation.MapCarrier{}
	w3c.Inject(ctx, c)
	if tp := c.Get("traceparent"); tp != "" {
		env.Trace = &wire.Trace{Traceparent: tp, Tracestate: c.Get("tracestate")}
	}
}

// ContextOf is ctx with the remote span env's Trace names, the parent of
// what the receiving code does about env; ctx itself when env carries
// none.
func ContextOf(ctx context.Context, env *wire.Envelope) context.Context {
	if env == nil || env.Trace == nil {
		return ctx
	}
	c := propagation.MapCarrier{"traceparent": env.Trace.Traceparent}
	if env.Trace.Tracestate != "" {
		c["tracestate"] = env.Trace.Tracestate
	}
	return w3c.Extract(ctx, c)
}
