package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"gopkg.in/natefinch/lumberjack.v2"

	"github.com/mcpp/gateway/wire"
)

// The Log's fixed sizes, each with its reason.
const (
	// QueueLength is how many records wait for the writer at most: a
	// burst of thousands of refusals (a flood of bad input) fits, and
	// past it records are dropped, never waited for.
	QueueLength = 8192
	// batchBytes bounds one write: the writer takes what is queued, whole
	// lines, up to this, so that a busy trail costs few system calls and
	// a rotation never falls inside a line.
	batchBytes = 64 << 10
	// errorLogInterval spaces the gateway log's lines about a failing
	// trail: one says it fails, the counter says how much.
	errorLogInterval = time.Minute
	// batchPause is how long the writer lets records gather after a
	// write: woken for each record of a flood (a participant refused
	// thousands of times a second), it would cost the pods' goroutines
	// a wake-up each; this way it is woken at most 200 times a second,
	// and a line is at most 5 ms later on disk. The queue holds
	// QueueLength records meanwhile: a flood of 1.6 million a second.
	batchPause = 5 * time.Millisecond
)

// Defaults of Options' rotation, each a flag of the gateway
// (--audit-log-max-size, --audit-log-max-backups): at most about a
// gigabyte and a tenth on disk, and at 500 bytes a line some two million
// decisions before the oldest file goes.
const (
	DefaultMaxSizeMB  = 100
	DefaultMaxBackups = 10
)

// Stdout is the Path that writes to standard output.
const Stdout = "-"

// Options say where a Log writes.
type Options struct {
	// Path is the file (created with mode 0600 when absent, with its
	// directory), or Stdout.
	Path string
	// MaxSizeMB is the size in megabytes at which the file is rotated:
	// renamed with the time in its name, and a new one begun.
	// MaxBackups is how many rotated files are kept (0 keeps all).
	// Neither concerns Stdout.
	MaxSizeMB  int
	MaxBackups int
	// Node is the gateway node's id, written in every line.
	Node string
	// Logger is told when writing fails (at most once a minute); nil:
	// slog.Default().
	Logger *slog.Logger
}

// Log is an audit trail being written. Its methods are safe for
// concurrent use; a nil *Log records nothing.
type Log struct {
	node   string
	log    *slog.Logger
	w      io.Writer
	closer io.Closer // the file's, nil for a writer of the caller's

	queue chan queued
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once

	written, full, failed atomic.Uint64
}

// queued is a record and the moment it was decided.
type queued struct {
	at time.Time
	r  Record
}

// Open opens the trail that o names: nil (and no error) when o.Path is
// empty, the trail being off. The file is not opened before the first
// line is written, so that a path that blocks (a named pipe nobody reads)
// never holds up the gateway's start; CheckPath says beforehand whether
// a path can be one.
func Open(o Options) (*Log, error) {
	switch o.Path {
	case "":
		return nil, nil
	case Stdout:
		return New(os.Stdout, nil, o), nil
	}
	if err := CheckPath(o.Path); err != nil {
		return nil, err
	}
	f := &lumberjack.Logger{Filename: o.Path, MaxSize: orDefault(o.MaxSizeMB, DefaultMaxSizeMB), MaxBackups: o.MaxBackups}
	return New(f, f, o), nil
}

func orDefault(v, d int) int {
	if v <= 0 {
		return d
	}
	return v
}

// CheckPath reports why path cannot be an audit trail: it is a
// directory, or its directory is not one.
func CheckPath(path string) error {
	if path == Stdout {
		return nil
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("%s is a directory: name a file in it", path)
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("the directory of %s: %w", path, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	return nil
}

// New starts a trail written to w (closed by Close through closer, when
// not nil): what Open does for a file, and what a test or a program with
// a sink of its own uses.
func New(w io.Writer, closer io.Closer, o Options) *Log {
	l := &Log{node: o.Node, log: o.Logger, w: w, closer: closer,
		queue: make(chan queued, QueueLength), stop: make(chan struct{}), done: make(chan struct{})}
	if l.log == nil {
		l.log = slog.Default()
	}
	go l.run()
	return l
}

// On reports whether records are kept: a caller whose record costs
// something to build asks first.
func (l *Log) On() bool { return l != nil }

// Record queues r, stamped now, and returns at once: when the queue is
// full (the writer is behind: a slow or blocked disk) r is dropped and
// counted. It never waits.
func (l *Log) Record(r Record) {
	if l == nil {
		return
	}
	select {
	case l.queue <- queued{at: time.Now(), r: r}:
	default:
		l.full.Add(1)
	}
}

// Written counts the lines written. Dropped counts the records lost:
// full, when the queue was full; failed, in writes that failed (a full
// disk, a file that cannot be opened).
func (l *Log) Written() uint64 {
	if l == nil {
		return 0
	}
	return l.written.Load()
}

// Dropped is documented with Written.
func (l *Log) Dropped() (full, failed uint64) {
	if l == nil {
		return 0, 0
	}
	return l.full.Load(), l.failed.Load()
}

// Close writes what is queued and closes the file, or gives up when ctx
// ends first (a write that blocks: the writer is then left to it, and
// the file open). Records after Close are dropped.
func (l *Log) Close(ctx context.Context) error {
	if l == nil {
		return nil
	}
	l.once.Do(func() { close(l.stop) })
	select {
	case <-l.done:
	case <-ctx.Done():
		return fmt.Errorf("audit: the trail was not written out: %w", ctx.Err())
	}
	if l.closer != nil {
		return l.closer.Close()
	}
	return nil
}

// line is a record as written: ts and node first.
type line struct {
	TS   string `json:"ts"`
	Node string `json:"node"`
	Record
}

// run is the writer: it takes the queued records, encodes them, and
// writes them whole, until Close, then writes what is left.
func (l *Log) run() {
	defer close(l.done)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // a message's "<" stays readable; nothing here is HTML
	var lastErr time.Time
	pause := time.NewTimer(batchPause)
	for {
		var q queued
		select {
		case q = <-l.queue:
		case <-l.stop:
			l.flush(&buf, enc, &lastErr)
			return
		}
		n := l.encode(enc, &buf, q)
	more:
		for buf.Len() < batchBytes {
			select {
			case q = <-l.queue:
				n += l.encode(enc, &buf, q)
			default:
				break more
			}
		}
		l.write(&buf, n, &lastErr)
		pause.Reset(batchPause)
		select {
		case <-pause.C:
		case <-l.stop:
			l.flush(&buf, enc, &lastErr)
			return
		}
	}
}

// flush writes what is still queued, at Close.
func (l *Log) flush(buf *bytes.Buffer, enc *json.Encoder, lastErr *time.Time) {
	for {
		n := 0
	batch:
		for buf.Len() < batchBytes {
			select {
			case q := <-l.queue:
				n += l.encode(enc, buf, q)
			default:
				break batch
			}
		}
		if n == 0 {
			return
		}
		l.write(buf, n, lastErr)
	}
}

// encode appends q's line to buf and reports 1, or 0 when it does not
// encode (a bug: every field is a plain value).
func (l *Log) encode(enc *json.Encoder, buf *bytes.Buffer, q queued) int {
	mark := buf.Len()
	if err := enc.Encode(line{TS: q.at.UTC().Format(wire.TimeFormat), Node: l.node, Record: q.r}); err != nil {
		buf.Truncate(mark)
		l.failed.Add(1)
		l.log.Error("an audit record does not encode", "decision", q.r.Decision, "err", err)
		return 0
	}
	return 1
}

// write writes buf's n lines in one call, counting them written or lost.
func (l *Log) write(buf *bytes.Buffer, n int, lastErr *time.Time) {
	defer buf.Reset()
	if n == 0 {
		return
	}
	if _, err := l.w.Write(buf.Bytes()); err != nil {
		l.failed.Add(uint64(n))
		if now := time.Now(); now.Sub(*lastErr) >= errorLogInterval {
			*lastErr = now
			full, failed := l.Dropped()
			l.log.Error("the audit trail cannot be written; its lines are dropped and counted (mcpp_audit_dropped_total)",
				"err", err, "dropped_queue_full", full, "dropped_write_error", failed)
		}
		return
	}
	l.written.Add(uint64(n))
}
