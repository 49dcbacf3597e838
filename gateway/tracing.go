package gateway

import (
	"context"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/pod"
	"github.com/mcpp/gateway/tracing"
	"github.com/mcpp/gateway/wire"
)

// The gateway's own spans (docs/protocol.md section 7, "Traces"): a join
// (over WebSocket, MCP or a publish), under the trace context of the
// request's traceparent header; an MCP host's request on /mcp (MCP's
// server span, "tools/call SERVER__TOOL"), under its params._meta
// traceparent, whose context becomes the trace of the envelopes the
// request makes (traceField). The pods make the rest (package pod).

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

// traceField is the trace field of an envelope a host's request makes:
// the span context ctx carries (the gateway's span of the request, or
// the host's _meta.traceparent), or nil.
func traceField(ctx context.Context) *wire.Trace {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	return &wire.Trace{Traceparent: tracing.Traceparent(sc), Tracestate: tracing.Tracestate(sc)}
}

// traced runs around the MCP methods that act in the pod (tools/call,
// resources/*, prompts/*, completion/complete): the host's
// params._meta traceparent (and tracestate) is the parent of what the
// request does; with tracing on, the request is MCP's server span of
// it, named after MCP's conventions.
func (e *mcpEndpoint) traced(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" && !strings.HasPrefix(method, "resources/") && !strings.HasPrefix(method, "prompts/") && method != "completion/complete" {
			return next(ctx, method, req)
		}
		params := req.GetParams()
		var meta map[string]any
		if params != nil {
			meta = params.GetMeta()
		}
		tp, _ := meta["traceparent"].(string)
		ts, _ := meta["tracestate"].(string)
		ctx = tracing.Remote(ctx, tp, ts)
		tr := e.g.tracer()
		if tr == nil {
			return next(ctx, method, req)
		}
		attrs := []attribute.KeyValue{tracing.MCPMethodName.String(method), tracing.Node.String(e.g.nodeID)}
		name := ""
		switch p := params.(type) {
		case *mcp.CallToolParamsRaw:
			name = p.Name
			attrs = append(attrs, tracing.GenAIToolName.String(p.Name), tracing.GenAIOperationName.String("execute_tool"))
		case *mcp.GetPromptParams:
			name = p.Name
		}
		if ss := req.GetSession(); ss != nil && ss.ID() != "" {
			attrs = append(attrs, tracing.MCPSessionID.String(ss.ID()))
		}
		if m := memberOf(ctx); m != nil {
			attrs = append(attrs, tracing.Participant.String(m.id), tracing.MessagingDestination.String(m.pod.Name))
		}
		ctx, span := tr.Start(ctx, strings.TrimSpace(method+" "+name), trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		defer span.End()
		res, err := next(ctx, method, req)
		switch r, _ := res.(*mcp.CallToolResult); {
		case err != nil:
			span.SetAttributes(tracing.ErrorType.String("_OTHER"))
			span.SetStatus(codes.Error, err.Error())
		case r != nil && r.IsError:
			span.SetAttributes(tracing.ErrorType.String("tool_error"))
			span.SetStatus(codes.Error, "tool_error")
		}
		return res, err
	}
}
