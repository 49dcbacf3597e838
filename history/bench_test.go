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
	frames := make([][]byte, len(ids))
	metas := make([]envelope.Meta, len(ids))
	for i, id := range ids {
		metas[i] = envelope.Meta{Kind: envelope.FrameEnvelope, Origin: "n", From: "alice", ID: id}
		frames[i] = envelope.Frame(&metas[i], make([]byte, 256))
	}
	now := time.Now().UnixNano()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		k := i % len(ids)
		x.Apply(uint64(i+1), now, frames[k], &metas[k], 256, 64, Loc{})
	}
}
