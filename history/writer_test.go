package history

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
			err := stream.Read(ctx, fmt.Sprintf("mcpp.pod.p%d", i), []uint64{l.Seq}, func(m Msg) error {
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
