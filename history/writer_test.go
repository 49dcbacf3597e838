package history

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpp/gateway/envelope"
)

// flakyStream is a Memory stream that fails every every-th message it is
// given, unstored, with an error that may pass (a leader that died): the
// writer holds, then sends it again.
type flakyStream struct {
	*Memory
	mu    sync.Mutex
	n     int
	every int
}

func (f *flakyStream) Append(subject string, msg []byte, msgID string, done func(uint64, bool, error)) {
	f.mu.Lock()
	f.n++
	fail := f.n%f.every == 0
	f.mu.Unlock()
	if fail {
		done(0, false, errors.New("no acknowledgement"))
		return
	}
	f.Memory.Append(subject, msg, msgID, done)
}

// TestWriterReusesBatches: the writer reuses the batches the stream
// settled (their frames' lists and buffers); round after round, with
// messages failed and sent again, every entry of every pod is stored,
// and reads back, at its location, as its own frame.
func TestWriterReusesBatches(t *testing.T) {
	stream := &flakyStream{Memory: NewMemory(1 << 20), every: 7}
	w := NewWriter(stream, WriterOptions{Node: "n", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer w.Close()
	const pods, rounds, each = 5, 20, 37
	xs := make([]*Index, pods)
	for i := range xs {
		xs[i] = NewIndex(rounds*each, time.Hour)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pos := uint64(0)
	for r := range rounds {
		pos++
		for n := range each {
			for i, x := range xs {
				id := fmt.Sprintf("p%d-r%d-%d", i, r, n)
				f := frameOf(id)
				var m envelope.Meta
				body, _ := envelope.DecodeFrame(f, &m)
				e := x.Apply(pos*1000+uint64(n), time.Now().UnixNano(), f, &m, len(body), 0, Loc{})
				w.Append(fmt.Sprintf("mcpp.pod.p%d", i), f, x, e, "")
			}
		}
		if err := w.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i, x := range xs {
		sel := x.Newest(0, false, all)
		if len(sel.Entries) != rounds*each {
			t.Fatalf("pod %d holds %d entries, want %d", i, len(sel.Entries), rounds*each)
		}
		locs := x.Locations(sel.Entries)
		for k, l := range locs {
			if l.Seq == 0 || l.Frame != nil {
				t.Fatalf("pod %d entry %d is not stored after Sync: %+v", i, k, l)
			}
			var got []byte
			err := stream.Read(ctx, fmt.Sprintf("mcpp.pod.p%d", i), []uint64{l.Seq}, func(m StoredMsg) error {
				f, err := Frame(m.Data, l.Off)
				got = f
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			var m envelope.Meta
			want := fmt.Sprintf("p%d-r%d-%d", i, k/each, k%each)
			if _, err := envelope.DecodeFrame(got, &m); err != nil || m.ID != want {
				t.Fatalf("pod %d entry %d reads back as %q (%v), want %s", i, k, m.ID, err, want)
			}
		}
	}
}

// gatedStream is a Memory stream whose first Append waits until open is
// closed: what is appended meanwhile waits in the writer's queue and is
// packed at once, as on a busy gateway.
type gatedStream struct {
	*Memory
	once    sync.Once
	entered chan struct{} // the first Append has begun
	open    chan struct{}
}

func (g *gatedStream) Append(subject string, msg []byte, msgID string, done func(uint64, bool, error)) {
	g.once.Do(func() {
		close(g.entered)
		<-g.open
	})
	g.Memory.Append(subject, msg, msgID, done)
}

// TestWriterKeepsAPodsOrderAcrossItsSubjects: a pod's entries and its
// live frames' markers go on two subjects, which the writer packs while
// the stream is busy; the stream holds them in the order they were
// appended (an ephemeral envelope sent between two durable ones is
// delivered between them on every node, which follow the stream's order),
// another pod's frames in between or not.
func TestWriterKeepsAPodsOrderAcrossItsSubjects(t *testing.T) {
	mem := NewMemory(1000)
	stream := &gatedStream{Memory: mem, entered: make(chan struct{}), open: make(chan struct{})}
	w := NewWriter(stream, WriterOptions{Node: "n", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer w.Close()
	const pod, markers, other = "mcpp.pod.lab", "mcpp.pod.lab.live", "mcpp.pod.other"
	w.Append(pod, frameOf("e0"), nil, nil, "")
	<-stream.entered // the writer is sending e0; what follows is packed together
	w.Append(pod, frameOf("e1"), nil, nil, "")
	w.AppendMarker(pod, markers, frameOf("m2"))
	w.Append(other, frameOf("o3"), nil, nil, "")
	w.Append(pod, frameOf("e4"), nil, nil, "")
	w.Append(pod, frameOf("e5"), nil, nil, "")
	w.AppendMarker(pod, markers, frameOf("m6"))
	w.AppendMarker(pod, markers, frameOf("m7"))
	w.Append(pod, frameOf("e8"), nil, nil, "")
	close(stream.open)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	messages := 0
	err := mem.Scan(ctx, []string{pod, markers}, 1, func(_ string, m StoredMsg) error {
		messages++
		return Frames(m.Data, func(_ int, frame []byte) error {
			var meta envelope.Meta
			if _, err := envelope.DecodeFrame(frame, &meta); err != nil {
				return err
			}
			got = append(got, meta.ID)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "e0 e1 m2 e4 e5 m6 m7 e8"; strings.Join(got, " ") != want {
		t.Fatalf("the stream holds the pod's frames in the order %s, want %s", strings.Join(got, " "), want)
	}
	// Still packed: e0 alone (sent before the rest came), then one
	// message for each run of a subject.
	if messages != 6 {
		t.Fatalf("the pod's frames took %d messages, want 6 (e0, e1, m2, e4+e5, m6+m7, e8)", messages)
	}
}

// lossyStream is a Memory stream across a network that fails: the first
// message it is given is lost on the way (its answer comes late, as a
// failure), while what it is given after it is stored, as when a route
// drops between two messages and comes back.
type lossyStream struct {
	*Memory
	mu    sync.Mutex
	first func(uint64, bool, error) // the lost message's answer, not given yet
	seen  []string                  // the subjects given, in order
}

func (l *lossyStream) Append(subject string, msg []byte, msgID string, done func(uint64, bool, error)) {
	l.mu.Lock()
	l.seen = append(l.seen, subject)
	lose := len(l.seen) == 1
	if lose {
		l.first = done
	}
	l.mu.Unlock()
	if !lose {
		l.Memory.Append(subject, msg, msgID, done)
	}
}

// TestWriterOneBatchOfAPodOnItsWay: across a network (IDs), a pod's next
// message is sent only once the one before it is stored, so that losing
// one and storing the next cannot put the pod's frames out of order in
// the stream; another pod's messages go meanwhile. (Before: the next was
// sent at once, stored first, and the lost one stored after it when sent
// again: e1 before e0.)
func TestWriterOneBatchOfAPodOnItsWay(t *testing.T) {
	mem := NewMemory(1000)
	stream := &lossyStream{Memory: mem}
	w := NewWriter(stream, WriterOptions{Node: "n", IDs: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer w.Close()
	const pod, other = "mcpp.pod.lab", "mcpp.pod.other"
	w.Append(pod, frameOf("e0"), nil, nil, "")
	deadline := time.Now().Add(5 * time.Second)
	for {
		stream.mu.Lock()
		sent := stream.first != nil
		stream.mu.Unlock()
		if sent || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	w.Append(pod, frameOf("e1"), nil, nil, "")
	w.Append(other, frameOf("o2"), nil, nil, "")
	// The other pod's message is stored; the pod's second waits.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for time.Now().Before(deadline) {
		stream.mu.Lock()
		n := len(stream.seen)
		stream.mu.Unlock()
		if n >= 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // time enough to send more, if it would
	stream.mu.Lock()
	seen := strings.Join(stream.seen, " ")
	lost := stream.first
	stream.mu.Unlock()
	if seen != pod+" "+other {
		t.Fatalf("the stream was given %q while the pod's first message was on its way, want %q", seen, pod+" "+other)
	}

	lost(0, false, errors.New("no acknowledgement")) // lost: the writer holds, then sends it again
	if err := w.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	err := mem.Scan(ctx, []string{pod}, 1, func(_ string, m StoredMsg) error {
		return Frames(m.Data, func(_ int, frame []byte) error {
			var meta envelope.Meta
			if _, err := envelope.DecodeFrame(frame, &meta); err != nil {
				return err
			}
			got = append(got, meta.ID)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, " ") != "e0 e1" {
		t.Fatalf("the stream holds the pod's frames as %v, want e0 e1", got)
	}

}

// inProcessStream answers its first message "a message of the same id is
// on its way into the stream" (ErrInProcess), then stores.
type inProcessStream struct {
	*Memory
	mu sync.Mutex
	n  int
}

func (s *inProcessStream) Append(subject string, msg []byte, msgID string, done func(uint64, bool, error)) {
	s.mu.Lock()
	s.n++
	first := s.n == 1
	s.mu.Unlock()
	if first {
		done(0, false, ErrInProcess)
		return
	}
	s.Memory.Append(subject, msg, msgID, done)
}

// TestWriterInProcessAskedAgain: a message the stream says another copy
// of is on its way is neither taken for stored (a cut-off leader drops
// what it could not commit) nor held for: it is sent again a moment
// later, and stored once. (Before: taken for stored at once.)
func TestWriterInProcessAskedAgain(t *testing.T) {
	mem := NewMemory(1000)
	stream := &inProcessStream{Memory: mem}
	holds := 0
	w := NewWriter(stream, WriterOptions{Node: "n", IDs: true, OnHold: func() { holds++ }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer w.Close()
	w.Append("mcpp.pod.lab", frameOf("e0"), nil, nil, "ev-1")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	stream.mu.Lock()
	n := stream.n
	stream.mu.Unlock()
	msgs := 0
	if err := mem.Scan(ctx, []string{"mcpp.pod.lab"}, 1, func(string, StoredMsg) error { msgs++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 2 || msgs != 1 || holds != 0 {
		t.Fatalf("the stream was given it %d times and holds %d messages; the writer held %d times", n, msgs, holds)
	}
}
