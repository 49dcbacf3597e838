package envelope

import (
	"testing"
	"time"
)

var benchEnvelope = []byte(`{"protocol":"mcpp/v0.1","id":"2f6b0c1e-1111-4222-8333-944455556666","kind":"mcp/request:tools/call",` +
	`"to":["bob"],"correlation_id":"env-1","context":{"id":"reason-789","type":"reasoning","parent":"ctx-123"},` +
	`"payload":{"jsonrpc":"2.0","method":"tools/call","params":{"name":"read","arguments":{"path":"/tmp/x"}}}}`)

// BenchmarkParse is the ingress cost of one envelope: parse, context, fill.
func BenchmarkParse(b *testing.B) {
	var e Envelope
	buf := make([]byte, len(benchEnvelope))
	now := time.Now()
	b.SetBytes(int64(len(benchEnvelope)))
	b.ReportAllocs()
	for b.Loop() {
		copy(buf, benchEnvelope)
		if err := e.Parse(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := ParseContext(e.Context, 4096); err != nil {
			b.Fatal(err)
		}
		e.Fill("alice", now)
	}
}

func BenchmarkFrame(b *testing.B) {
	m := Meta{Kind: FrameEnvelope, Origin: "n1", From: "alice", To: []string{"bob"}, ContextID: "reason-789", ContextType: "reasoning", Ancestors: []string{"ctx-123"}}
	var frame []byte
	var got Meta
	b.ReportAllocs()
	for b.Loop() {
		frame = AppendFrame(frame[:0], &m, benchEnvelope)
		if _, err := DecodeFrame(frame, &got); err != nil {
			b.Fatal(err)
		}
	}
}
