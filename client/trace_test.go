package client

import (
	"encoding/json"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/wire"
)

// TestTraceContinues: a Go agent that sends within a span has the pod
// carry it: the gateway's span of the envelope is a child of the
// sender's, the receiver gets the sender's trace context with the
// envelope, and its own span under ContextOf is in the same trace.
func TestTraceContinues(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	url := startGateway(t, func(c *gateway.Config) { c.TracerProvider = tp })
	alice := dial(t, url, Options{Pod: "tr", Participant: "alice"})
	bob := dial(t, url, Options{Pod: "tr", Participant: "bob"})
	expect[*Welcome](t, alice)
	expect[*Welcome](t, bob)

	tracer := tp.Tracer("agent")
	ctx, plan := tracer.Start(ctxT(t), "plan")
	if _, err := alice.Send(ctx, &wire.Envelope{Kind: "chat", Payload: json.RawMessage(`{"text":"traced"}`)}); err != nil {
		t.Fatal(err)
	}
	plan.End()
	got := expect[*Message](t, bob)
	if got.Trace == nil || got.Trace.Traceparent != "00-"+plan.SpanContext().TraceID().String()+"-"+plan.SpanContext().SpanID().String()+"-01" {
		t.Fatalf("bob received trace %+v, want alice's span %s", got.Trace, plan.SpanContext().SpanID())
	}
	_, handle := tracer.Start(ContextOf(ctxT(t), got.Envelope), "handle")
	handle.End()
	if handle.SpanContext().TraceID() != plan.SpanContext().TraceID() {
		t.Fatalf("bob's span is in trace %s, alice's in %s", handle.SpanContext().TraceID(), plan.SpanContext().TraceID())
	}
	var accept sdktrace.ReadOnlySpan
	eventually(t, 5e9, "the gateway's span", func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == "accept tr" {
				accept = s
				return true
			}
		}
		return false
	})
	if accept.Parent().SpanID() != plan.SpanContext().SpanID() || accept.SpanKind() != trace.SpanKindConsumer {
		t.Fatalf("the gateway's accept span: parent %s, want alice's %s", accept.Parent().SpanID(), plan.SpanContext().SpanID())
	}

	// Without a span in ctx the gateway's own span is what bob gets.
	if _, err := alice.Send(ctxT(t), &wire.Envelope{Kind: "chat"}); err != nil {
		t.Fatal(err)
	}
	if got := expect[*Message](t, bob); got.Trace == nil || got.Trace.Traceparent == "" ||
		got.Trace.Traceparent[3:35] == plan.SpanContext().TraceID().String() {
		t.Fatalf("bob received trace %+v, want a trace of the gateway's own", got.Trace)
	}
}
