package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpp/gateway/wire"
)

// lines is a writer that keeps what it is given.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *lines) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *lines) objects(t *testing.T) []map[string]any {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSuffix(w.buf.String(), "\n"), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("a line is not one JSON object: %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func closeLog(t *testing.T, l *Log) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLines: each record is one line, ts (RFC 3339, UTC, milliseconds)
// and node first, its fields in snake_case, unset ones left out, and
// never a raw newline inside a line.
func TestLines(t *testing.T) {
	w := &lines{}
	l := New(w, nil, Options{Node: "n1"})
	before := time.Now().Add(-time.Millisecond)
	l.Record(Record{Decision: Kick, Pod: "lab", Participant: "bot", By: "alice", Reason: "loop\nand <b>loop</b>", Connections: 2})
	l.Record(Record{Decision: Join, Pod: "lab", Participant: "alice", Transport: TransportWS, RemoteAddr: "127.0.0.1:5000",
		Credential:   Credential{Auth: AuthJWT, TokenSHA256: TokenHash("secret"), Issuer: "https://idp", KeyID: "k1", JTI: "j1"},
		Capabilities: wire.Kinds("chat")})
	closeLog(t, l)
	got := w.objects(t)
	if len(got) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(got), w.buf.String())
	}
	first := strings.SplitN(w.buf.String(), "\n", 2)[0]
	if !strings.HasPrefix(first, `{"ts":"`) || !strings.Contains(first, `,"node":"n1","decision":"kick"`) {
		t.Fatalf("ts, node and decision first: %s", first)
	}
	ts, err := time.Parse(time.RFC3339, got[0]["ts"].(string))
	if err != nil || !strings.HasSuffix(got[0]["ts"].(string), "Z") || len(got[0]["ts"].(string)) != len("2026-01-02T15:04:05.000Z") {
		t.Fatalf("ts %q: want RFC 3339 in UTC with milliseconds (%v)", got[0]["ts"], err)
	}
	if ts.Before(before.Truncate(time.Millisecond)) || ts.After(time.Now()) {
		t.Fatalf("ts %v is not when it was recorded", ts)
	}
	want := map[string]any{"node": "n1", "decision": "kick", "pod": "lab", "participant": "bot", "by": "alice",
		"reason": "loop\nand <b>loop</b>", "connections": float64(2)}
	for k, v := range want {
		if got[0][k] != v {
			t.Errorf("kick's %s = %v, want %v", k, got[0][k], v)
		}
	}
	if len(got[0]) != len(want)+1 {
		t.Errorf("kick has fields it was not given: %v", got[0])
	}
	if !strings.Contains(first, "<b>") {
		t.Errorf("HTML escaped: %s", first)
	}
	j := got[1]
	if j["auth"] != "jwt" || j["token_sha256"] != "2bb80d537b1da3e3" || j["iss"] != "https://idp" || j["kid"] != "k1" || j["jti"] != "j1" ||
		j["transport"] != "ws" || j["remote_addr"] != "127.0.0.1:5000" || len(j["capabilities"].([]any)) != 1 {
		t.Errorf("join: %v", j)
	}
	if strings.Contains(w.buf.String(), "secret") {
		t.Error("a token is in the trail")
	}
}

// blocked is a sink whose writes wait until it is let go: a disk that
// stopped, or a named pipe nobody reads.
type blocked struct {
	release chan struct{}
	w       lines
	writes  chan struct{}
}

func (b *blocked) Write(p []byte) (int, error) {
	select {
	case b.writes <- struct{}{}:
	default:
	}
	<-b.release
	return b.w.Write(p)
}

// TestBlockedSinkNeverBlocks: while the sink blocks, Record returns at
// once; what does not fit the queue is dropped and counted; once the sink
// moves again, the rest is written, and every record is either written or
// counted as dropped.
func TestBlockedSinkNeverBlocks(t *testing.T) {
	sink := &blocked{release: make(chan struct{}), writes: make(chan struct{}, 1)}
	l := New(sink, nil, Options{Node: "n1"})
	l.Record(Record{Decision: Grant, Pod: "lab"})
	<-sink.writes // the writer is stuck in its first write
	const total = 3 * QueueLength
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range total {
			l.Record(Record{Decision: CapabilityRefused, Pod: "lab", Participant: "bot", Kind: "chat", Code: "capability_violation"})
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Record waited for a blocked sink")
	}
	full, _ := l.Dropped()
	if full < total-QueueLength {
		t.Fatalf("dropped %d of %d records sent while the sink was blocked, want at least %d (the queue holds %d)", full, total, total-QueueLength, QueueLength)
	}
	close(sink.release)
	closeLog(t, l)
	full, failed := l.Dropped()
	if got := l.Written() + full + failed; got != total+1 {
		t.Fatalf("written %d + dropped %d + failed %d = %d, want every one of %d records", l.Written(), full, failed, got, total+1)
	}
	if n := len(sink.w.objects(t)); uint64(n) != l.Written() {
		t.Fatalf("%d lines in the sink, Written says %d", n, l.Written())
	}
}

// full is a sink that has no room: every write fails as a full disk's.
type fullDisk struct{}

func (fullDisk) Write([]byte) (int, error) {
	return 0, &os.PathError{Op: "write", Path: "audit.log", Err: syscall.ENOSPC}
}

// TestFullDisk: a sink that fails loses its lines, counted as failed, and
// the gateway's log says so once, not once a line.
func TestFullDisk(t *testing.T) {
	var logs lines
	l := New(fullDisk{}, nil, Options{Node: "n1", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for range 100 {
		l.Record(Record{Decision: Join, Pod: "lab"})
	}
	closeLog(t, l)
	full, failed := l.Dropped()
	if failed != 100 || full != 0 || l.Written() != 0 {
		t.Fatalf("failed %d, full %d, written %d: want the 100 failed", failed, full, l.Written())
	}
	if n := strings.Count(logs.buf.String(), "cannot be written"); n != 1 || !strings.Contains(logs.buf.String(), "no space left on device") {
		t.Fatalf("the log says it %d times, want once with the error:\n%s", n, logs.buf.String())
	}
}

// TestCloseGivesUp: Close of a trail whose sink blocks returns when its
// context ends, saying so.
func TestCloseGivesUp(t *testing.T) {
	sink := &blocked{release: make(chan struct{}), writes: make(chan struct{}, 1)}
	defer close(sink.release)
	l := New(sink, nil, Options{})
	l.Record(Record{Decision: Join})
	<-sink.writes
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := l.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close of a blocked trail: %v", err)
	}
	var nilLog *Log
	nilLog.Record(Record{Decision: Join}) // off: nothing, and no panic
	if nilLog.On() || nilLog.Close(ctx) != nil {
		t.Fatal("a nil Log is off")
	}
}

// TestRotation: a file rotates by size into backups, each line whole in
// one file, and the oldest beyond MaxBackups are removed.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	l, err := Open(Options{Path: path, MaxSizeMB: 1, MaxBackups: 1, Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	reason := strings.Repeat("r", 400)
	const n = 6000 // about 3 MB
	for i := range n {
		l.Record(Record{Decision: Kick, Pod: "lab", Participant: "bot", Reason: reason, Connections: i + 1})
		if i%1000 == 999 {
			waitWritten(t, l, uint64(i+1)) // within the queue's length: nothing dropped
		}
	}
	closeLog(t, l)
	if full, failed := l.Dropped(); full+failed != 0 {
		t.Fatalf("dropped %d, %d", full, failed)
	}
	var files []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		files = append(files, e.Name())
	}
	// lumberjack removes the backups beyond MaxBackups in the background.
	deadline := time.Now().Add(5 * time.Second)
	for len(files) > 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		files = files[:0]
		ents, _ = os.ReadDir(dir)
		for _, e := range ents {
			files = append(files, e.Name())
		}
	}
	if len(files) != 2 {
		t.Fatalf("files %v: want audit.log and one backup", files)
	}
	last := 0
	for _, name := range []string{files[0], files[1]} {
		if name == "audit.log" {
			continue
		}
		last = checkWhole(t, filepath.Join(dir, name), 0)
	}
	if end := checkWhole(t, path, last); end != n {
		t.Fatalf("the last line of audit.log is number %d, want %d", end, n)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("audit.log has mode %v, want 0600", st.Mode().Perm())
	}
}

func waitWritten(t *testing.T, l *Log, n uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.Written() < n {
		if time.Now().After(deadline) {
			t.Fatalf("written %d, want %d", l.Written(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// checkWhole checks that every line of file is a whole record, numbered
// (connections) one after the other from after, and returns the last.
func checkWhole(t *testing.T, file string, after int) int {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	n := after
	first := true
	for sc.Scan() {
		var r struct{ Connections int }
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: a line is cut: %q", file, sc.Text())
		}
		if !first || after != 0 {
			if r.Connections != n+1 {
				t.Fatalf("%s: line %d follows %d", file, r.Connections, n)
			}
		}
		first = false
		n = r.Connections
	}
	return n
}

// TestCheckPath: a directory, or a file in a directory that is not one,
// is refused before anything is written.
func TestCheckPath(t *testing.T) {
	dir := t.TempDir()
	if err := CheckPath(dir); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("a directory: %v", err)
	}
	if err := CheckPath(filepath.Join(dir, "missing", "audit.log")); err == nil {
		t.Fatal("a file in a directory that does not exist was taken")
	}
	if err := CheckPath(filepath.Join(dir, "audit.log")); err != nil {
		t.Fatal(err)
	}
	if l, err := Open(Options{}); l != nil || err != nil {
		t.Fatal("an empty path is the trail off")
	}
}

// BenchmarkRecord: what one decision costs its caller, with the trail
// written to nowhere (io.Discard) and with a sink that never takes
// anything (every record past the queue dropped): the same, since Record
// only queues.
func BenchmarkRecord(b *testing.B) {
	r := Record{Decision: CapabilityRefused, Pod: "lab", Participant: "bot", Kind: "chat", Code: "capability_violation", Rule: RuleNoCapability}
	b.Run("discard", func(b *testing.B) {
		l := New(io.Discard, nil, Options{Node: "n1"})
		b.ReportAllocs()
		for b.Loop() {
			l.Record(r)
		}
		_ = l.Close(context.Background())
	})
	b.Run("blocked", func(b *testing.B) {
		sink := &blocked{release: make(chan struct{}), writes: make(chan struct{}, 1)}
		l := New(sink, nil, Options{Node: "n1"})
		b.ReportAllocs()
		for b.Loop() {
			l.Record(r)
		}
		close(sink.release)
		_ = l.Close(context.Background())
	})
}
