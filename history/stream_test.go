package history

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mcpp/gateway/envelope"
)

// openStream starts an embedded NATS server with JetStream (the real one,
// as the gateway runs it) and opens the history stream on it, without a
// cache (what reads from the stream do is what the tests look at).
func openStream(t testing.TB, entries int) *Stream {
	t.Helper()
	s, _ := openStreamWith(t, Config{Entries: entries})
	return s
}

// openStreamWith is openStream with cfg's Entries, CacheBytes and File
// (the rest as openStream's), and the stream's connection.
func openStreamWith(t testing.TB, cfg Config) (*Stream, *nats.Conn) {
	t.Helper()
	dir := t.TempDir()
	ns, err := server.NewServer(&server.Options{
		ServerName: "history-test", DontListen: true, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: dir, JetStreamMaxMemory: 256 << 20, MaxPending: 1 << 30,
	})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS not ready")
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, nc, Config{Subjects: []string{"mcpp.pod.>"}, Entries: cfg.Entries, MaxAge: time.Hour,
		MaxBytes: 64 << 20, MaxMsgSize: 4 << 20, CacheBytes: cfg.CacheBytes, File: cfg.File}, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		nc.Close()
		ns.Shutdown()
		_ = os.RemoveAll(dir)
	})
	return s, nc
}

// frameOf is a stored frame of an envelope with id in a pod.
func frameOf(id string) []byte {
	m := envelope.Meta{Kind: envelope.FrameEnvelope, Origin: "n", From: "alice", ID: id}
	return envelope.AppendFrame(nil, &m, []byte(`{"id":"`+id+`","kind":"chat"}`))
}

// TestWriterStoresInOrder: frames of several pods appended at once are
// stored, each pod's in its order, and every index entry learns where;
// reading them back by location gives each frame.
func TestWriterStoresInOrder(t *testing.T) {
	for _, b := range []struct {
		name string
		b    func(t *testing.T) Backend
	}{
		{"jetstream", func(t *testing.T) Backend { return openStream(t, 1000) }},
		{"memory", func(*testing.T) Backend { return NewMemory(1000 + Slack) }},
	} {
		t.Run(b.name, func(t *testing.T) {
			backend := b.b(t)
			w := NewWriter(backend, WriterOptions{Node: "n"})
			defer w.Close()
			const pods, each = 5, 400
			idx := make([]*Index, pods)
			entries := make([][]*Entry, pods)
			for i := range idx {
				idx[i] = NewIndex(1000, time.Hour)
			}
			for n := 0; n < each; n++ {
				for i := range pods {
					id := fmt.Sprintf("p%d-%d", i, n)
					f := frameOf(id)
					var m envelope.Meta
					body, _ := envelope.DecodeFrame(f, &m)
					e := idx[i].Apply(uint64(n+1), time.Now().UnixNano(), f, &m, len(body), 0, Loc{})
					entries[i] = append(entries[i], e)
					w.Append(fmt.Sprintf("mcpp.pod.p%d", i), f, idx[i], e, "")
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := w.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if w.Pending() != 0 {
				t.Fatalf("%d bytes still pending after Sync", w.Pending())
			}
			for i := range pods {
				sel := idx[i].Newest(0, false, func(*envelope.Meta) bool { return true })
				locs := idx[i].Locations(sel.Entries)
				var last Loc
				for n, l := range locs {
					if l.Seq == 0 || l.Frame != nil {
						t.Fatalf("pod %d entry %d has no location after Sync", i, n)
					}
					if l.Seq < last.Seq || (l.Seq == last.Seq && l.Off <= last.Off && n > 0) {
						t.Fatalf("pod %d entry %d stored at %+v, before the previous one at %+v", i, n, l, last)
					}
					last = l.Loc
				}
				// Read back the first and the last by location.
				for _, n := range []int{0, each - 1} {
					var got []byte
					err := backend.Read(ctx, fmt.Sprintf("mcpp.pod.p%d", i), []uint64{locs[n].Seq}, func(m StoredMsg) error {
						f, err := Frame(m.Data, locs[n].Off)
						got = f
						return err
					})
					if err != nil {
						t.Fatal(err)
					}
					var m envelope.Meta
					if _, err := envelope.DecodeFrame(got, &m); err != nil || m.ID != fmt.Sprintf("p%d-%d", i, n) {
						t.Fatalf("pod %d entry %d reads back as %q (%v)", i, n, m.ID, err)
					}
				}
			}
		})
	}
}
