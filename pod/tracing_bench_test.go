package pod

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mcpp/gateway/tracing"
)

// BenchmarkFanoutTracing is BenchmarkFanout's envelope of 256 B to a pod
// of 100 members, with tracing off, on with every envelope sampled, and
// on with 1% sampled, in the same run: the SDK's batch span processor
// and an exporter that drops what it is handed (the export itself runs
// in the processor's goroutine, beside the fan-out, and costs what the
// exporter's encoding costs: mcpp bench measures it with a real one).
// ns/op is per envelope handled, allocs/op what tracing adds to the
// fan-out.
//
//	go test -run '^$' -bench FanoutTracing -benchmem ./pod/
func BenchmarkFanoutTracing(b *testing.B) {
	for _, way := range []string{"off", "all", "1%"} {
		b.Run(way, func(b *testing.B) {
			n, _ := testNode(b, 100000, nil)
			if way != "off" {
				sampler := sdktrace.ParentBased(sdktrace.AlwaysSample())
				if way == "1%" {
					sampler = sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01))
				}
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(sampler))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				n.Traces = NewTraces(tp.Tracer(tracing.Instrumentation))
			}
			benchFanoutOf(b, n, 100, 256)
		})
	}
}
