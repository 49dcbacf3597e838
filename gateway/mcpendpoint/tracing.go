package mcpendpoint

import (
	"context"
	"reflect"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpp/gateway/tracing"
	"github.com/mcpp/gateway/wire"
)

// An MCP host's request on /mcp is MCP's server span of it ("tools/call
// SERVER__TOOL", docs/protocol.md section 7, "Traces"), under its
// params._meta traceparent, whose context becomes the trace of the
// envelopes the request makes (traceField).

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
func (e *Endpoint) traced(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" && !strings.HasPrefix(method, "resources/") && !strings.HasPrefix(method, "prompts/") && method != "completion/complete" {
			return next(ctx, method, req)
		}
		params := paramsOf(req)
		var meta map[string]any
		if params != nil {
			meta = params.GetMeta()
		}
		tp, _ := meta["traceparent"].(string)
		ts, _ := meta["tracestate"].(string)
		ctx = tracing.Remote(ctx, tp, ts)
		tr := e.g.Tracer
		if tr == nil {
			return next(ctx, method, req)
		}
		attrs := []attribute.KeyValue{tracing.MCPMethodName.String(method), tracing.Node.String(e.g.NodeID)}
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

// paramsOf is req's params, or nil. A request sent without params (a
// list of a client of the revisions with sessions, whose SDK sends none
// when given none) holds a nil pointer of its params' type, whose methods
// are not to be called.
func paramsOf(req mcp.Request) mcp.Params {
	p := req.GetParams()
	if p == nil {
		return nil
	}
	if v := reflect.ValueOf(p); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil
	}
	return p
}
