package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/wire"
)

var tailCommand = command{
	synopsis: "--pod NAME [filter flags] [--history N|all] [--fold=0] [--resume-file F] [--count N] [--all] [--quiet] [--pretty]",
	summary:  "Join a pod and print every envelope it receives (and its past), one line of JSON each.",
	usage: `Each envelope goes to standard output as one line of JSON, the bytes the
gateway sent. system/welcome and system/presence go to standard error
instead, unless --all. The filter is the gateway's (docs/protocol.md
section 4): each filter flag is passed as the query parameter of the same
name, and only when given; the client filters nothing itself.

Filter flags:
  --main=0|1            envelopes without a context (default 1)
  --contexts all|none   every envelope in a context (default all)
  --types a,b           also admit contexts of these types
  --exclude-types a,b   never admit contexts of these types
  --ids a,b             also admit these context ids
  --subtree             --ids also admit their descendants
  --conclusions         also admit conclusion-kind envelopes in any context
  --routing all|directed  directed drops envelopes addressed only to others
  --echo                receive your own envelopes (same participant id)
  --batch               ask for batched delivery (output is the same)
  Yes/no flags take their value after =: --main=0, --echo=1.
  Presets: main only --contexts none; main plus reasoning --contexts none
  --types reasoning; conclusions only --contexts none --conclusions; one
  context --main=0 --contexts none --ids ID.

History flags (docs/protocol.md section 8):
  --history N|all       first print the pod's past: the last N envelopes the
                        filter admits (all: all of them), oldest first, then
                        the live ones, none missing and none twice. The past
                        is folded: a concluded context shows only its
                        conclusion and its system/context event, and a
                        consumed transient envelope comes collapsed to its
                        summary (--pretty marks both)
  --fold=0              that past unfolded and uncollapsed, as it was relayed
  --resume-file F       keep in file F the id of the last envelope printed
                        that the pod's history keeps (F is replaced
                        atomically after each one). When F exists at start,
                        tail resumes after that id: it prints what it missed
                        while it was not running, then live envelopes, with
                        no gap and no duplicate (across a restart of the
                        gateway too, when its history is on disk). When the
                        gateway no longer has that id, tail says so on
                        standard error (envelopes may be missing) and goes
                        on, with the --history past if given
  --reconnect=0         end (exit 1) when the connection is lost, instead of
                        joining again and resuming after the last envelope
                        printed (the default: tail reconnects, waiting
                        longer each time, up to 10s between attempts, and
                        says on standard error when envelopes may have been
                        missed meanwhile)

Output flags:
  --count N     exit 0 after N envelopes (welcome and presence count only
                with --all)
  --all         print welcome and presence on standard output too
  --quiet       do not print welcome and presence at all (unless --all)
  --pretty      a view for people: time, sender, kind, the context indented
                by its depth, a short payload; in colour on a terminal
                unless NO_COLOR is set. In the history replayed after the
                welcome, a concluded context's conclusion is marked
                "⤶ fold" and its system/context event says how many of its
                envelopes were folded away; a collapsed envelope shows its
                summary and "collapsed, consumed by ID"

tail runs until --count is reached (exit 0), it is interrupted (exit 0,
or 1 if --count was not reached) or the gateway ends the connection for
good (exit 1): another connection took the participant id (4000), the
gateway refuses to let it join again, or, with --reconnect=0, any end of
the connection.
`,
	run: runTail,
}

// optBool is a yes/no flag that knows whether it was given.
type optBool struct {
	set, val bool
}

func (b *optBool) String() string {
	if b == nil || !b.set {
		return ""
	}
	return strconv.FormatBool(b.val)
}

func (b *optBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("want 0 or 1, not %q", s)
	}
	b.set, b.val = true, v
	return nil
}

func (b *optBool) IsBoolFlag() bool { return true }

// ptr is the flag as a wire.Filter field: nil when not given.
func (b *optBool) ptr() *bool {
	if !b.set {
		return nil
	}
	return wire.Bool(b.val)
}

// optString is a string flag that knows whether it was given.
type optString struct {
	set bool
	val string
}

func (s *optString) String() string {
	if s == nil {
		return ""
	}
	return s.val
}

func (s *optString) Set(v string) error {
	s.set, s.val = true, v
	return nil
}

// filterFlags are tail's filter flags, each a query parameter.
type filterFlags struct {
	bools   map[string]*optBool   // query parameter -> flag
	strings map[string]*optString // query parameter -> flag
}

func (f *filterFlags) register(fs *flag.FlagSet) {
	f.bools = map[string]*optBool{}
	f.strings = map[string]*optString{}
	for _, p := range []string{"main", "subtree", "conclusions", "echo", "batch"} {
		b := &optBool{}
		f.bools[p] = b
		fs.Var(b, p, "")
	}
	for _, p := range []string{"contexts", "types", "exclude_types", "ids", "routing"} {
		s := &optString{}
		f.strings[p] = s
		fs.Var(s, strings.ReplaceAll(p, "_", "-"), "")
		if strings.Contains(p, "_") {
			fs.Var(s, p, "") // the query parameter's own spelling
		}
	}
}

// filter is the filter of the flags given, as the client sends it (the
// same query parameters): what the gateway judges.
func (f *filterFlags) filter() (wire.Filter, error) {
	w := wire.Filter{
		Main: f.bools["main"].ptr(), Subtree: f.bools["subtree"].ptr(), Conclusions: f.bools["conclusions"].ptr(),
		Echo: f.bools["echo"].ptr(), Batch: f.bools["batch"].ptr(),
	}
	for _, p := range []string{"contexts", "routing"} {
		s := f.strings[p]
		if s.set && strings.TrimSpace(s.val) == "" {
			return w, usagef("--%s needs a value", p)
		}
	}
	w.Contexts, w.Routing = f.strings["contexts"].val, f.strings["routing"].val
	list := func(p string) []string {
		if s := f.strings[p]; s.set {
			return append([]string{}, splitList(s.val)...)
		}
		return nil
	}
	w.Types, w.ExcludeTypes, w.IDs = list("types"), list("exclude_types"), list("ids")
	return w, nil
}

// historyFlag reads --history: N or all.
func historyFlag(v string) (int, error) {
	switch v {
	case "", "0":
		return 0, nil
	case wire.HistoryAll:
		return client.HistoryAll, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, usagef("--history is a number of envelopes or all, not %q", v)
	}
	return n, nil
}

func runTail(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("tail")
	var cf connFlags
	cf.register(fs, e)
	var ff filterFlags
	ff.register(fs)
	count := fs.Int("count", 0, "")
	all := fs.Bool("all", false, "")
	quiet := fs.Bool("quiet", false, "")
	pretty := fs.Bool("pretty", false, "")
	historyArg := fs.String("history", "", "")
	fold := fs.Bool("fold", true, "")
	resumePath := fs.String("resume-file", "", "")
	reconnect := fs.Bool("reconnect", true, "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	if *count < 0 {
		return usagef("--count must be 0 (no limit) or more, not %d", *count)
	}
	history, err := historyFlag(*historyArg)
	if err != nil {
		return err
	}
	filter, err := ff.filter()
	if err != nil {
		return err
	}
	stderr := &lockedWriter{w: e.stderr} // the client reports on its own goroutine
	lastFailure := ""
	opts := client.Options{Filter: &filter, History: history, Reconnect: client.Reconnect{
		Disable: !*reconnect,
		Report: func(attempt int, err error) {
			switch {
			case attempt == 0:
				lastFailure = ""
				fmt.Fprintf(stderr, "mcpp tail: %v; reconnecting\n", err)
			case err.Error() == lastFailure:
				fmt.Fprintf(stderr, "mcpp tail: reconnecting: attempt %d failed the same way\n", attempt)
			default:
				lastFailure = err.Error()
				fmt.Fprintf(stderr, "mcpp tail: reconnecting: attempt %d failed: %v\n", attempt, err)
			}
		},
	}}
	if !*fold {
		opts.Fold = wire.Bool(false)
	}
	var rf *resumeFile
	if *resumePath != "" {
		if rf, err = openResumeFile(*resumePath); err != nil {
			return err
		}
		opts.Resume = rf.last
	}

	c, err := cf.dial(ctx, opts)
	if err != nil {
		return err
	}
	defer c.Close()

	out := bufio.NewWriterSize(e.stdout, 64<<10)
	defer out.Flush()
	var outP, errP *printer
	if *pretty {
		outP = newPrinter(e.stdoutColor)
		errP = outP
		if e.stderrColor != e.stdoutColor {
			errP = newPrinter(e.stderrColor)
			errP.ctxs = outP.ctxs // one view of the contexts seen
		}
	}
	t := &tailer{stderr: stderr, out: out, outP: outP, errP: errP, all: *all, quiet: *quiet, rf: rf, pending: c.Events, resumeFrom: opts.Resume}
	n := 0
	for {
		ev, err := c.Next(ctx)
		if err != nil {
			if ferr := t.flush(); ferr != nil {
				return ferr
			}
			if ctx.Err() != nil {
				if *count > 0 && n < *count {
					return fmt.Errorf("interrupted after %d of %d envelopes", n, *count)
				}
				return nil
			}
			// Why the client ended: a close code (4000), a reconnection
			// refused for good, or any end with --reconnect=0.
			var re *client.RefusedError
			if errors.As(err, &re) {
				return fmt.Errorf("could not join again: %s", refusalText(re, "connection"))
			}
			return err
		}
		printed, err := t.handle(ev)
		if err != nil {
			return err
		}
		n += printed
		if *count > 0 && n >= *count {
			if err := t.flush(); err != nil {
				return err
			}
			return nil // the deferred Close leaves politely
		}
	}
}

// tailer prints what tail receives.
type tailer struct {
	stderr     io.Writer
	out        *bufio.Writer
	outP, errP *printer // nil without --pretty
	all, quiet bool
	rf         *resumeFile // nil without --resume-file
	pending    func() <-chan client.Event
	lastID     string // the last envelope printed that history keeps, not yet in rf
	resumeFrom string // the id of the resume file at start

	// The history replayed after the current welcome.
	replayLeft      int  // envelopes of it still to come
	folded          bool // it is folded
	conclusionKinds []string
}

// handle prints one event and returns how many lines went to standard
// output (what --count counts).
func (t *tailer) handle(ev client.Event) (int, error) {
	switch ev := ev.(type) {
	case *client.Welcome:
		t.welcome(ev.Welcome, true)
		return t.aside(ev.Raw)
	case *client.Reconnected:
		t.welcome(ev.Welcome, false)
		switch {
		case ev.Resumed:
			fmt.Fprintf(t.stderr, "mcpp tail: reconnected; resumed after %s, nothing missed\n", ev.ResumedAfter)
		case ev.ResumedAfter != "":
			fmt.Fprintf(t.stderr, "mcpp tail: reconnected, but the gateway could not resume after %s: envelopes sent meanwhile may be missing\n", ev.ResumedAfter)
		default:
			fmt.Fprintf(t.stderr, "mcpp tail: reconnected; no envelope printed yet that history keeps, to resume after: envelopes sent meanwhile may be missing\n")
		}
		return t.aside(ev.Raw)
	case *client.Presence:
		return t.aside(ev.Raw)
	case *client.Message:
		return t.envelope(ev.Raw, ev.Envelope)
	case *client.ContextEvent:
		return t.envelope(ev.Raw, ev.Envelope)
	case *client.GatewayError:
		return t.envelope(ev.Raw, ev.Envelope)
	}
	return 0, nil
}

// welcome notes what history follows a welcome (the first one, or that
// of a reconnection).
func (t *tailer) welcome(w wire.Welcome, first bool) {
	t.replayLeft, t.folded = 0, false
	t.conclusionKinds = w.Limits.ConclusionKinds
	if len(t.conclusionKinds) == 0 {
		t.conclusionKinds = wire.DefaultConclusionKinds
	}
	h := w.History
	if h == nil {
		return
	}
	t.replayLeft = h.Replayed
	t.folded = h.Folded != nil
	if first && h.Resumed != nil && !*h.Resumed {
		fmt.Fprintf(t.stderr, "mcpp tail: the gateway could not resume after %s (its history no longer has it, or has none): envelopes may be missing\n", t.resumeFrom)
	}
}

// aside prints a welcome or a presence: on standard error, or on
// standard output with --all.
func (t *tailer) aside(raw []byte) (int, error) {
	if t.all {
		return t.envelope(raw, nil)
	}
	if t.quiet {
		return 0, nil
	}
	if err := t.out.Flush(); err != nil { // keep the two streams in order on a terminal
		return 0, err
	}
	if t.errP != nil {
		fmt.Fprintln(t.stderr, t.errP.format(raw, time.Now()))
	} else {
		fmt.Fprintf(t.stderr, "%s\n", raw)
	}
	return 0, nil
}

// envelope prints one envelope on standard output; env is nil for a
// welcome or presence printed with --all.
func (t *tailer) envelope(raw []byte, env *wire.Envelope) (int, error) {
	replayed := env != nil && t.replayLeft > 0 && env.InHistory()
	if replayed {
		t.replayLeft--
	}
	if t.outP != nil {
		v := view{}
		if replayed {
			v = view{replayed: true, folded: t.folded}
			v.fold = t.folded && env.ContextID() != "" && slices.Contains(t.conclusionKinds, env.Kind)
		}
		t.out.WriteString(t.outP.formatView(raw, time.Now(), v))
	} else {
		t.out.Write(raw)
	}
	t.out.WriteByte('\n')
	if env != nil && env.ID != "" && env.InHistory() {
		t.lastID = env.ID
	}
	// Flush when nothing else is waiting; with --resume-file after each
	// envelope, then the file, so that it never names an envelope not
	// yet printed.
	if t.rf != nil || len(t.pending()) == 0 {
		return 1, t.flush()
	}
	return 1, nil
}

// flush writes out what is buffered, then the resume file.
func (t *tailer) flush() error {
	if err := t.out.Flush(); err != nil {
		return err
	}
	if t.rf != nil && t.lastID != "" {
		if err := t.rf.save(t.lastID); err != nil {
			return fmt.Errorf("--resume-file: %v", err)
		}
	}
	return nil
}

// resumeFile is tail's --resume-file: the id of the last envelope
// printed that the pod's history keeps.
type resumeFile struct {
	path string
	last string // the id in the file
}

// openResumeFile reads the id in path, if the file exists, and checks
// that the file can be written.
func openResumeFile(path string) (*resumeFile, error) {
	r := &resumeFile{path: path}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("--resume-file: %v", err)
	default:
		id := strings.TrimSpace(string(b))
		if len(id) > 128 || strings.ContainsAny(id, " \t\r\n") {
			return nil, fmt.Errorf("--resume-file %s does not hold an envelope id (one line, at most 128 bytes)", path)
		}
		r.last = id
	}
	// Fail now rather than after the first envelope.
	tmp, err := r.temp()
	if err != nil {
		return nil, fmt.Errorf("--resume-file: %v", err)
	}
	_ = tmp.Close()
	_ = os.Remove(tmp.Name())
	return r, nil
}

func (r *resumeFile) temp() (*os.File, error) {
	dir, base := filepath.Split(r.path)
	if dir == "" {
		dir = "."
	}
	return os.CreateTemp(dir, "."+base+".*.tmp")
}

// save replaces the file with one holding id: a new file renamed over
// the old one, so that a reader (or a tail killed meanwhile) sees the old
// id or the new one, never a part.
func (r *resumeFile) save(id string) error {
	if id == r.last {
		return nil
	}
	f, err := r.temp()
	if err != nil {
		return err
	}
	_, err = f.WriteString(id + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), r.path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	r.last = id
	return nil
}

// lockedWriter serializes writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
