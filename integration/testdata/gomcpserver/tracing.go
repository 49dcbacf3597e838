package main

import (
	"context"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpp/gateway/tracing"
)

// The server's own spans, when the OTEL_* variables ask for traces (the
// tracing tests run it so, under mcpp bridge, which passes its
// environment on): each tools/call is MCP's server span, under the
// trace context its params._meta carries, as an instrumented server
// continues its client's trace.

// traced is the middleware of the server's spans; tracer nil: none.
func traced(tracer trace.Tracer) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			p, ok := req.GetParams().(*mcp.CallToolParamsRaw)
			if tracer == nil || !ok {
				return next(ctx, method, req)
			}
			meta := p.GetMeta()
			tp, _ := meta["traceparent"].(string)
			ts, _ := meta["tracestate"].(string)
			ctx, span := tracer.Start(tracing.Remote(ctx, tp, ts), strings.TrimSpace(method+" "+p.Name),
				trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(tracing.MCPMethodName.String(method), tracing.GenAIToolName.String(p.Name)))
			defer span.End()
			return next(ctx, method, req)
		}
	}
}

// startTracing turns the server's spans on as the environment says, and
// returns what flushes them at exit.
func startTracing() (trace.Tracer, func()) {
	p, err := tracing.Start(context.Background(), "gomcpserver")
	if err != nil || p == nil {
		return nil, func() {}
	}
	return p.Tracer("gomcpserver"), func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracing.ShutdownTimeout)
		defer cancel()
		_ = p.Shutdown(ctx)
	}
}
