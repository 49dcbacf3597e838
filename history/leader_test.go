package history

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestLeaderNext: the leader's answer for the first message of a subject
// from a sequence on, which a scan asks when the replica that answered
// its direct gets had nothing more (it may be behind): the message, its
// sequence and time, and nil past the last.
func TestLeaderNext(t *testing.T) {
	s := openStream(t, 100)
	done := make(chan uint64, 3)
	for _, f := range [][]byte{frameOf("a"), frameOf("b"), frameOf("c")} {
		subject := "mcpp.pod.lab"
		if bytes.Contains(f, []byte(`"b"`)) {
			subject = "mcpp.pod.other"
		}
		s.Append(subject, f, "", func(seq uint64, _ bool, err error) {
			if err != nil {
				t.Error(err)
			}
			done <- seq
		})
	}
	for range 3 {
		<-done
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := s.leaderNext(ctx, "mcpp.pod.lab", 2)
	if err != nil || m == nil || m.Seq != 3 || !bytes.Equal(m.Data, frameOf("c")) || time.Since(time.Unix(0, m.Time)) > time.Minute {
		t.Fatalf("the next of lab from 2: %+v, %v", m, err)
	}
	if m, err := s.leaderNext(ctx, "mcpp.pod.lab", 4); err != nil || m != nil {
		t.Fatalf("past the last: %+v, %v", m, err)
	}
}
