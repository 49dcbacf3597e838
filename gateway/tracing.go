package gateway

import (
	"net/http"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/pod"
	"github.com/mcpp/gateway/tracing"
)

// The gateway's own spans (docs/protocol.md section 7, "Traces"): a join
// (over WebSocket, MCP or a publish), under the trace context of the
// request's traceparent header. An MCP host's requests on /mcp are
// package mcpendpoint's (its tracing.go), made with the gateway's tracer;
// the pods make the rest (package pod).

// tracer is the gateway's tracer, or nil when tracing is off.
func (g *Gateway) tracer() trace.Tracer {
	if g.cfg.TracerProvider == nil {
		return nil
	}
	return g.cfg.TracerProvider.Tracer(tracing.Instrumentation)
}

// traceJoin records a join's decision (who into which pod over which
// transport; e its refusal, or nil) as a span under the request's
// traceparent header, when tracing is on.
func (g *Gateway) traceJoin(r *http.Request, transport, podName string, who pod.Admitted, e *envelope.Error) {
	tr := g.tracer()
	if tr == nil {
		return
	}
	ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	_, span := tr.Start(ctx, "join "+podName, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		tracing.MessagingSystem.String(tracing.System), tracing.MessagingDestination.String(podName),
		tracing.MessagingOperationName.String("join"), tracing.Participant.String(who.ID), tracing.Transport.String(transport),
		tracing.Node.String(g.nodeID)))
	if e != nil {
		span.SetAttributes(tracing.ErrorType.String(string(e.Code)))
		span.SetStatus(codes.Error, string(e.Code))
	}
	span.End()
}
