package bridge

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpp/gateway/tracing"
	"github.com/mcpp/gateway/wire"
)

// A request's trace goes on into the server, and its answer comes back
// in it (docs/protocol.md section 11): the bridge's span of the call
// (MCP's client span, "tools/call echo", under the trace context of the
// request's envelope, or else of its params._meta) is the trace context
// the server is sent, in params._meta traceparent and tracestate, as
// OpenTelemetry's MCP conventions propagate it, and the one its answer's
// envelope carries. With no tracer (mcpp bridge without OTEL_*
// variables) the span records nothing, and the request's own trace
// context is what goes on.

// tracer is the bridge's tracer: Config.TracerProvider's, else the
// process's (otel's global: none unless set).
func (b *Bridge) tracer() trace.Tracer {
	tp := b.cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(tracing.Instrumentation + "/bridge")
}

// startCall starts c's span under the request's trace context and
// returns params with that span's context in _meta.
func (b *Bridge) startCall(c *call, env *wire.Envelope, params json.RawMessage) json.RawMessage {
	ctx := context.Background()
	switch {
	case env.Trace != nil:
		ctx = tracing.Remote(ctx, env.Trace.Traceparent, env.Trace.Tracestate)
	default:
		m := gjson.GetManyBytes(params, "_meta.traceparent", "_meta.tracestate")
		ctx = tracing.Remote(ctx, m[0].Str, m[1].Str)
	}
	name := ""
	attrs := []attribute.KeyValue{tracing.MCPMethodName.String(c.method), tracing.JSONRPCRequestID.String(idText(c.id)),
		tracing.Requester.String(c.requester), tracing.MessagingMessageID.String(c.envID), tracing.Participant.String(b.self)}
	if c.method == "tools/call" || c.method == "prompts/get" {
		name = gjson.GetBytes(params, "name").Str
	}
	if c.method == "tools/call" && name != "" {
		attrs = append(attrs, tracing.GenAIToolName.String(name), tracing.GenAIOperationName.String("execute_tool"))
	}
	_, c.span = b.tracer().Start(ctx, strings.TrimSpace(c.method+" "+name), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	sc := c.span.SpanContext()
	if !sc.IsValid() {
		return params
	}
	return withTraceMeta(params, tracing.Traceparent(sc), tracing.Tracestate(sc))
}

// idText is a JSON-RPC id as jsonrpc.request.id has it.
func idText(id json.RawMessage) string {
	if r := gjson.ParseBytes(id); r.Type == gjson.String {
		return r.Str
	}
	return string(id)
}

// withTraceMeta returns params with _meta.traceparent (and tracestate,
// when not "") set: the trace context the server continues.
func withTraceMeta(params json.RawMessage, traceparent, tracestate string) json.RawMessage {
	p, ok := object(params)
	if !ok {
		p = map[string]json.RawMessage{}
	}
	meta, ok := object(p["_meta"])
	if !ok {
		meta = map[string]json.RawMessage{}
	}
	meta["traceparent"] = encode(traceparent)
	delete(meta, "tracestate")
	if tracestate != "" {
		meta["tracestate"] = encode(tracestate)
	}
	p["_meta"] = encode(meta)
	return encode(p)
}

// traceOf is the trace field of an envelope that continues span (nil
// when it names none).
func traceOf(span trace.Span) *wire.Trace {
	if span == nil {
		return nil
	}
	sc := span.SpanContext()
	if !sc.IsValid() {
		return nil
	}
	return &wire.Trace{Traceparent: tracing.Traceparent(sc), Tracestate: tracing.Tracestate(sc)}
}

// endCall ends c's span with its answer: a JSON-RPC error's code, a
// tool's error result, or why it got none.
func endCall(c *call, payload json.RawMessage, why string) {
	if c.span == nil {
		return
	}
	errType := why
	r := gjson.GetManyBytes(payload, "error.code", "result.isError")
	switch {
	case r[0].Exists():
		errType = r[0].Raw
		c.span.SetAttributes(tracing.RPCStatusCode.String(r[0].Raw))
	case r[1].Bool():
		errType = "tool_error"
	}
	if errType != "" {
		c.span.SetAttributes(tracing.ErrorType.String(errType))
		c.span.SetStatus(codes.Error, errType)
	}
	c.span.End()
}
