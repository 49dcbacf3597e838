package history

import (
	"testing"

	"github.com/mcpp/gateway/envelope"
)

// TestFramesOfEveryVersion: a stream message of one frame is the frame
// itself, whatever the frame's version (a grant's frame carries Via in a
// version of its own), and is never read as a batch of frames.
func TestFramesOfEveryVersion(t *testing.T) {
	plain := envelope.Frame(&envelope.Meta{Kind: envelope.FrameEnvelope, Origin: "n", From: "a", ID: "e1"}, []byte(`{}`))
	via := envelope.Frame(&envelope.Meta{Kind: envelope.FrameEnvelope, Origin: "n", From: "a", ID: "g2", Via: []string{"g1"}}, []byte(`{}`))
	for _, frames := range [][][]byte{{plain}, {via}, {plain, via}, {via, via}} {
		var items []item
		for _, f := range frames {
			items = append(items, item{frame: f})
		}
		msg := appendBatch(nil, items)
		var got []string
		if err := Frames(msg, func(_ int, frame []byte) error {
			var m envelope.Meta
			if _, err := envelope.DecodeFrame(frame, &m); err != nil {
				return err
			}
			got = append(got, m.ID)
			return nil
		}); err != nil || len(got) != len(frames) {
			t.Fatalf("%d frames read back as %v: %v", len(frames), got, err)
		}
	}
}
