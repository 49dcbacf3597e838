package envelope

import "testing"

// TestFrameSize: Frame's slice is exactly the frame, however long its
// strings (one and two-byte lengths).
func TestFrameSize(t *testing.T) {
	long := string(make([]byte, 300))
	for _, m := range []Meta{
		{Kind: FrameEnvelope, Origin: "n", From: "alice", ID: "e1"},
		{Kind: FrameEnvelope, Origin: "n", From: long, To: []string{"a", long}, ContextID: "c", ContextType: "t",
			ContextParent: "p", Ancestors: []string{"p", long}, Seq: 1 << 40, ID: long, Incarnation: "i",
			Consumes: []string{"x", long}, Protocol: Span{200, 211}},
	} {
		body := make([]byte, 1000)
		f := Frame(&m, body)
		if len(f) != cap(f) || len(f) != len(AppendFrame(nil, &m, body)) {
			t.Fatalf("frame of %d bytes in a slice of %d (want exactly %d)", len(f), cap(f), len(AppendFrame(nil, &m, body)))
		}
	}
}
