package envelope

import (
	"strings"
	"testing"
)

// TestFrameVia: a grant's Via travels in its frame's header (version 3),
// and a frame without it is written as before (version 2), so that the
// history index's headers grow by nothing.
func TestFrameVia(t *testing.T) {
	body := []byte(`{"kind":"capability/grant"}`)
	m := Meta{Kind: FrameEnvelope, Origin: "n1", From: "bob", ID: "g-2", Via: []string{"g-1", "g-0"}}
	frame := Frame(&m, body)
	if frame[0] != frameVersionVia || len(frame) != frameSize(&m, body) {
		t.Fatalf("version %d, %d bytes (size says %d)", frame[0], len(frame), frameSize(&m, body))
	}
	var got Meta
	b, err := DecodeFrame(frame, &got)
	if err != nil || string(b) != string(body) || strings.Join(got.Via, ",") != "g-1,g-0" || got.ID != "g-2" || HeaderID(frame) != "g-2" {
		t.Fatalf("decoded %+v %q %v", got, b, err)
	}
	m.Via = nil
	plain := Frame(&m, body)
	// Via cost a count and, per id, a length and its bytes.
	if plain[0] != frameVersion || len(plain) != len(frame)-len("#")-len("#g-1#g-0") {
		t.Fatalf("a frame without Via: version %d, %d bytes", plain[0], len(plain))
	}
	got.Reset()
	if _, err := DecodeFrame(plain, &got); err != nil || len(got.Via) != 0 {
		t.Fatalf("decoded %+v %v", got, err)
	}
}

// TestFrameTrace: the accepting node's span travels in the frame's
// header (version 5), with or without Via, and a frame without one is
// written as before.
func TestFrameTrace(t *testing.T) {
	body := []byte(`{"kind":"chat"}`)
	tc, _ := ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	for _, via := range [][]string{nil, {"g-1"}} {
		m := Meta{Kind: FrameEnvelope, Origin: "n1", From: "bob", ID: "e-1", Via: via, Trace: tc}
		frame := Frame(&m, body)
		if frame[0] != frameVersionTrace || len(frame) != frameSize(&m, body) {
			t.Fatalf("version %d, %d bytes (size says %d)", frame[0], len(frame), frameSize(&m, body))
		}
		var got Meta
		b, err := DecodeFrame(frame, &got)
		if err != nil || string(b) != string(body) || got.Trace != tc || strings.Join(got.Via, ",") != strings.Join(via, ",") || HeaderID(frame) != "e-1" {
			t.Fatalf("decoded %+v %q %v", got, b, err)
		}
		if _, err := DecodeFrame(frame[:len(frame)-len(body)-1], &got); err != ErrBadFrame {
			t.Fatalf("a frame cut in its trace: %v", err)
		}
	}
	m := Meta{Kind: FrameEnvelope, Origin: "n1", From: "bob", ID: "e-1"}
	if f := Frame(&m, body); f[0] != frameVersion {
		t.Fatalf("a frame without trace: version %d", f[0])
	}
}
