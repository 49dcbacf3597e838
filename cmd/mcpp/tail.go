package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
)

var tailCommand = command{
	synopsis: "--pod NAME [filter flags] [--count N] [--all] [--quiet] [--pretty]",
	summary:  "Join a pod and print every envelope it receives, one line of JSON each.",
	usage: `Each envelope goes to standard output as one line of JSON, the bytes the
gateway sent. system/welcome and system/presence go to standard error
instead, unless --all. The filter is the gateway's (SPEC section 4): each
filter flag is passed as the query parameter of the same name, and only
when given; the client filters nothing itself.

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

Output flags:
  --count N     exit 0 after N envelopes (welcome and presence count only
                with --all)
  --all         print welcome and presence on standard output too
  --quiet       do not print welcome and presence at all (unless --all)
  --pretty      a view for people: time, sender, kind, the context indented
                by its depth, a short payload; in colour on a terminal
                unless NO_COLOR is set

tail runs until --count is reached (exit 0), it is interrupted (exit 0,
or 1 if --count was not reached) or the gateway ends the connection
(exit 1).
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

func (b *optBool) query() string {
	if b.val {
		return "1"
	}
	return "0"
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

// query is the filter's query parameters: the flags given, as given.
func (f *filterFlags) query() url.Values {
	q := url.Values{}
	for p, b := range f.bools {
		if b.set {
			q.Set(p, b.query())
		}
	}
	for p, s := range f.strings {
		if s.set {
			q.Set(p, s.val)
		}
	}
	return q
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
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	if *count < 0 {
		return usagef("--count must be 0 (no limit) or more, not %d", *count)
	}

	conn, err := cf.dial(ctx, ff.query())
	if err != nil {
		return err
	}
	defer conn.CloseNow()

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
	n := 0
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			_ = out.Flush()
			if ctx.Err() != nil {
				if *count > 0 && n < *count {
					return fmt.Errorf("interrupted after %d of %d envelopes", n, *count)
				}
				return nil
			}
			return closeError(err)
		}
		if typ != websocket.MessageText {
			continue
		}
		for _, line := range splitLines(data) {
			aside := false
			if !*all {
				if h, ok := parseHeader(line); ok && (h.Kind == "system/welcome" || h.Kind == "system/presence") {
					aside = true
				}
			}
			if aside {
				if *quiet {
					continue
				}
				_ = out.Flush() // keep the two streams in order on a terminal
				if errP != nil {
					fmt.Fprintln(e.stderr, errP.format(line, time.Now()))
				} else {
					fmt.Fprintf(e.stderr, "%s\n", line)
				}
				continue
			}
			if outP != nil {
				out.WriteString(outP.format(line, time.Now()))
			} else {
				out.Write(line)
			}
			out.WriteByte('\n')
			n++
			if *count > 0 && n >= *count {
				if err := out.Flush(); err != nil {
					return err
				}
				cctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				go func() { <-cctx.Done(); _ = conn.CloseNow() }()
				_ = conn.Close(websocket.StatusNormalClosure, "")
				return nil
			}
		}
		if err := out.Flush(); err != nil {
			return err
		}
	}
}

// printer renders envelopes for people (tail --pretty).
type printer struct {
	color bool
	loc   *time.Location
	// payloadWidth is how many characters of payload are shown.
	payloadWidth int
	ctxs         *contextView
}

func newPrinter(color bool) *printer {
	return &printer{color: color, loc: time.Local, payloadWidth: 100, ctxs: newContextView()}
}

// contextView remembers the contexts seen so far: their depth and type.
type contextView struct {
	seen map[string]seenContext
}

type seenContext struct {
	depth int
	typ   string
}

// maxSeen bounds the memory of a long tail; the view starts over when it
// is reached (depths are then guessed again from what follows).
const maxSeen = 100000

func newContextView() *contextView { return &contextView{seen: map[string]seenContext{}} }

// wireContext is the object form of a context.
type wireContext struct {
	ID     string `json:"id"`
	Type   string `json:"type"`
	Parent string `json:"parent"`
}

// resolve returns the context's label (id, and type when known) and its
// depth: a path of n segments has depth n; an object context has its
// parent's depth plus one, a parent not seen counting as a root (depth 1);
// a root has depth 1.
func (v *contextView) resolve(raw json.RawMessage) (id, typ string, depth int, ok bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", "", 0, false
	}
	if len(v.seen) >= maxSeen {
		clear(v.seen)
	}
	var path string
	if json.Unmarshal(raw, &path) == nil {
		depth = strings.Count(path, "/") + 1
		if s, ok := v.seen[path]; ok {
			typ = s.typ
		}
		v.seen[path] = seenContext{depth: depth, typ: typ}
		return path, typ, depth, true
	}
	var c wireContext
	if json.Unmarshal(raw, &c) != nil {
		return string(raw), "", 1, true
	}
	prev, known := v.seen[c.ID]
	switch {
	case known && c.Parent == "":
		depth = prev.depth // the parent was fixed at creation; later envelopes may omit it
	case c.Parent != "":
		if p, ok := v.seen[c.Parent]; ok {
			depth = p.depth + 1
		} else {
			depth = 2 // an unknown parent counts as a root
		}
	default:
		depth = 1
	}
	typ = c.Type
	if typ == "" && known {
		typ = prev.typ // so was the type
	}
	v.seen[c.ID] = seenContext{depth: depth, typ: typ}
	return c.ID, typ, depth, true
}

// viewEnvelope is what the pretty view reads of an envelope.
type viewEnvelope struct {
	TS      string          `json:"ts"`
	From    string          `json:"from"`
	To      json.RawMessage `json:"to"`
	Kind    string          `json:"kind"`
	Context json.RawMessage `json:"context"`
	Payload json.RawMessage `json:"payload"`
}

// ANSI SGR codes.
const (
	sgrDim    = "2"
	sgrBold   = "1"
	sgrRed    = "31"
	sgrYellow = "33"
	sgrCyan   = "36"
)

var senderColors = []string{"32", "34", "35", "92", "93", "94", "95", "96"}

func (p *printer) paint(sgr, s string) string {
	if !p.color || s == "" {
		return s
	}
	return "\x1b[" + sgr + "m" + s + "\x1b[0m"
}

// pad pads s with spaces to width characters (at least one space after).
func pad(s string, width int) string {
	n := utf8.RuneCountInString(s)
	if n >= width {
		return s + " "
	}
	return s + strings.Repeat(" ", width-n)
}

// format renders one envelope on one line; received is the time shown
// when the envelope has no readable ts.
func (p *printer) format(line []byte, received time.Time) string {
	var v viewEnvelope
	if json.Unmarshal(line, &v) != nil {
		return string(line)
	}
	t, err := time.Parse(time.RFC3339Nano, v.TS)
	if err != nil {
		t = received
	}
	var b strings.Builder
	b.WriteString(p.paint(sgrDim, t.In(p.loc).Format("15:04:05.000")))
	b.WriteByte(' ')

	sender := v.From
	var to []string
	if json.Unmarshal(v.To, &to) == nil && len(to) > 0 {
		sender += "→" + strings.Join(to, ",")
	}
	b.WriteString(p.paint(p.senderColor(v.From), pad(sender, 16)))

	kindColor := sgrBold
	switch {
	case v.Kind == "system/error":
		kindColor = sgrRed
	case strings.HasPrefix(v.Kind, "system/"):
		kindColor = sgrYellow
	}
	b.WriteString(p.paint(kindColor, pad(v.Kind, 22)))

	if id, typ, depth, ok := p.ctxs.resolve(v.Context); ok {
		label := "[" + id
		if typ != "" {
			label += " " + typ
		}
		label += "]"
		b.WriteString(strings.Repeat("  ", depth-1))
		b.WriteString(p.paint(sgrCyan, label))
		b.WriteByte(' ')
	}
	b.WriteString(p.summary(&v))
	return strings.TrimRight(b.String(), " ")
}

func (p *printer) senderColor(from string) string {
	if strings.HasPrefix(from, "system:") {
		return sgrYellow
	}
	h := fnv.New32a()
	_, _ = io.WriteString(h, from)
	return senderColors[h.Sum32()%uint32(len(senderColors))]
}

// summary is a short form of the payload: gateway messages in words,
// others as compact JSON, cut at payloadWidth characters.
func (p *printer) summary(v *viewEnvelope) string {
	s := ""
	switch v.Kind {
	case "system/welcome":
		var w struct {
			You          struct{ ID string }
			Pod          string
			Participants []struct{ ID string }
		}
		if json.Unmarshal(v.Payload, &w) == nil {
			ids := make([]string, len(w.Participants))
			for i, o := range w.Participants {
				ids[i] = o.ID
			}
			s = fmt.Sprintf("you are %s in pod %s; %d others", w.You.ID, w.Pod, len(ids))
			if len(ids) > 0 {
				s += ": " + strings.Join(ids, ", ")
			}
		}
	case "system/presence":
		var pr struct {
			Event       string
			Participant struct{ ID string }
		}
		if json.Unmarshal(v.Payload, &pr) == nil {
			s = pr.Event + " " + pr.Participant.ID
		}
	case "system/error":
		var ge gatewayError
		if json.Unmarshal(v.Payload, &ge) == nil {
			return p.paint(sgrRed, truncate(ge.String(), p.payloadWidth*2))
		}
	case "system/context":
		var c struct {
			Event  string
			Reason string
			Stats  struct {
				Messages     int64
				Participants []string
			}
		}
		if json.Unmarshal(v.Payload, &c) == nil {
			s = fmt.Sprintf("%s (%s): %d messages from %d participants", c.Event, c.Reason, c.Stats.Messages, len(c.Stats.Participants))
		}
	}
	if s != "" {
		return truncate(s, p.payloadWidth*2)
	}
	if len(v.Payload) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if json.Compact(&buf, v.Payload) != nil {
		buf.Reset()
		buf.Write(v.Payload)
	}
	return truncate(buf.String(), p.payloadWidth)
}

// truncate cuts s to n characters, marking the cut with "…".
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
