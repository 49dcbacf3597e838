package history

import (
	"strconv"
	"testing"
	"time"

	"github.com/mcpp/gateway/envelope"
)

// BenchmarkIndexApply: what recording one envelope costs a pod's index
// (at its --history bound, so that each one also evicts the oldest).
func BenchmarkIndexApply(b *testing.B) {
	x := NewIndex(1000, time.Hour)
	ids := make([]string, 4096)
	for i := range ids {
		ids[i] = "e-" + strconv.Itoa(i) + "-0f3a9c2e-5d4b-4c1e-9a7f-1b2c3d4e5f60"
	}
	frame := make([]byte, 330)
	now := time.Now().UnixNano()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		m := envelope.Meta{Kind: envelope.FrameEnvelope, Origin: "n", From: "alice", ID: ids[i%len(ids)]}
		x.Apply(uint64(i+1), now, &m, 256, Loc{}, frame)
	}
}
