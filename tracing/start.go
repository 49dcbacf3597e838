package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Provider is a process's tracing, on: its spans go to the exporter the
// environment names, in batches.
type Provider struct {
	tp *sdktrace.TracerProvider
}

// Tracer is the provider's tracer for the named instrumentation (the
// package that makes the spans).
func (p *Provider) Tracer(name string) trace.Tracer { return p.tp.Tracer(name) }

// TracerProvider is the SDK's provider under p.
func (p *Provider) TracerProvider() trace.TracerProvider { return p.tp }

// Shutdown exports what is still buffered, within ctx, and stops.
func (p *Provider) Shutdown(ctx context.Context) error {
	if err := p.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// Enabled reports whether the environment turns tracing on: it names an
// exporter (OTEL_TRACES_EXPORTER, but "none") or an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). Off
// by default: a gateway nobody configured exports nothing, and its
// fan-out costs nothing more (docs/protocol.md section 7).
func Enabled() bool {
	if e := os.Getenv("OTEL_TRACES_EXPORTER"); e != "" {
		return e != "none"
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Start turns tracing on as the environment says, or returns nil, nil
// when it does not (Enabled). The exporter is OpenTelemetry's autoexport
// reading of OTEL_TRACES_EXPORTER (otlp, console, none) and of the OTLP
// variables (OTEL_EXPORTER_OTLP_PROTOCOL grpc or http/protobuf, the
// endpoint, headers, timeout); the sampler the SDK's reading of
// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (parentbased_always_on
// by default); the service's name OTEL_SERVICE_NAME, else service (and
// OTEL_RESOURCE_ATTRIBUTES adds to the resource). It also makes W3C
// trace context the process's propagator.
func Start(ctx context.Context, service string) (*Provider, error) {
	if !Enabled() {
		return nil, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: the exporter OTEL_* names: %w", err)
	}
	if autoexport.IsNoneSpanExporter(exp) {
		return nil, nil
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(service)))
	if err == nil {
		var env *resource.Resource
		if env, err = resource.New(ctx, resource.WithFromEnv()); err == nil {
			res, err = resource.Merge(res, env)
		}
	}
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: the resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return &Provider{tp: tp}, nil
}

// ShutdownTimeout bounds how long a process waits, as it stops, for its
// last spans to be exported.
const ShutdownTimeout = 5 * time.Second
