package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

var sendCommand = command{
	synopsis: "--pod NAME --kind KIND [--to a,b] [--context JSON|PATH] [--payload JSON|@FILE|-] [--id ID]\n       mcpp send --pod NAME --stdin [--kind KIND] [--to a,b] [--context JSON|PATH]",
	summary:  "Send one envelope, or one per line of standard input.",
	usage: `Envelope flags:
  --kind KIND             the envelope's kind (required without --stdin)
  --to a,b                address it to these participants (default: everyone)
  --context JSON|PATH     a context: a value starting with { is the JSON
                          object ({"id":"r1","type":"reasoning","parent":"t1"}),
                          anything else is a path string (task-1/reason-1)
  --payload JSON|@FILE|-  the payload: JSON, the JSON in FILE, or the JSON
                          on standard input (default: no payload). To send a
                          string, quote it: --payload '"hello"'
  --id ID                 the envelope id (default: a new UUID)
  --correlation-id ID     the correlation_id field

  --stdin                 send one envelope per line of standard input: each
                          non-empty line is a whole envelope JSON object. A
                          line without an id gets a new one; --kind, --to,
                          --context and --correlation-id fill the fields a
                          line lacks. --payload and --id do not apply.
                          The lines are paced to stay under the rate and
                          burst the gateway announces in its welcome (and
                          its per-context rate for lines with a context).
  --wait DURATION         how long to wait for the gateway's errors after the
                          last envelope (default 500ms)

After sending, send asks the gateway for a no-op answer (gateway/filter with
an empty payload) and waits up to --wait for it: the gateway answers one
connection in order, so every system/error about the envelopes sent has
come by then. Each error is printed on standard error (code and message,
with the envelope id, and the line with --stdin) and send exits 1;
otherwise it exits 0. send joins with a filter that receives nothing but
what is addressed to it; joining as the participant id of a running tail
replaces that tail's connection.
`,
	run: runSend,
}

// outEnvelope is an envelope send builds, fields in the order of SPEC
// section 2.
type outEnvelope struct {
	ID            string          `json:"id"`
	To            []string        `json:"to,omitempty"`
	Kind          string          `json:"kind"`
	CorrelationID string          `json:"correlation_id,omitempty"`
	Context       json.RawMessage `json:"context,omitempty"`
	Payload       json.RawMessage `json:"payload,omitempty"`
}

type sendFlags struct {
	kind, to, context, payload, id, correlationID string
	stdin                                         bool
	wait                                          time.Duration
}

func runSend(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("send")
	var cf connFlags
	cf.register(fs, e)
	var sf sendFlags
	fs.StringVar(&sf.kind, "kind", "", "")
	fs.StringVar(&sf.to, "to", "", "")
	fs.StringVar(&sf.context, "context", "", "")
	fs.StringVar(&sf.payload, "payload", "", "")
	fs.StringVar(&sf.id, "id", "", "")
	fs.StringVar(&sf.correlationID, "correlation-id", "", "")
	fs.BoolVar(&sf.stdin, "stdin", false, "")
	fs.DurationVar(&sf.wait, "wait", 500*time.Millisecond, "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if sf.wait < 0 {
		return usagef("--wait must not be negative")
	}
	var ctxJSON json.RawMessage
	if given["context"] {
		var err error
		if ctxJSON, err = contextFlag(sf.context); err != nil {
			return err
		}
	}
	to := splitList(sf.to)

	// The envelopes to send: one, or a reader of lines.
	var one []byte
	var lines *bufio.Scanner
	if sf.stdin {
		if given["payload"] || given["id"] {
			return usagef("--payload and --id do not apply to --stdin: each line is a whole envelope")
		}
		lines = bufio.NewScanner(e.stdin)
		lines.Buffer(make([]byte, 64<<10), 16<<20)
	} else {
		if sf.kind == "" {
			return usagef("--kind is required")
		}
		env := outEnvelope{ID: sf.id, To: to, Kind: sf.kind, CorrelationID: sf.correlationID, Context: ctxJSON}
		if env.ID == "" {
			env.ID = newID()
		}
		if given["payload"] {
			p, err := payloadFlag(sf.payload, e.stdin)
			if err != nil {
				return err
			}
			env.Payload = p
		}
		var err error
		if one, err = json.Marshal(env); err != nil {
			return usagef("%v", err)
		}
	}

	conn, err := cf.dial(ctx, quietQuery())
	if err != nil {
		return err
	}
	s := &sender{stderr: e.stderr, sent: map[string]string{}, barrierID: "mcpp-sync-" + newID(), barrier: make(chan struct{})}
	r := startRequest(conn, s.handle)
	defer r.close()
	if err := r.waitWelcome(ctx); err != nil {
		return err
	}

	if one != nil {
		var h header
		_ = json.Unmarshal(one, &h)
		s.track(h.ID, "")
		if err := r.write(ctx, one); err != nil {
			return err
		}
	} else {
		// Pace by the welcome's limits.
		var w struct {
			Limits welcomeLimits `json:"limits"`
		}
		_ = json.Unmarshal(r.welcome.Payload, &w)
		l := w.Limits
		sendPace, ctxPace := newPacer(l.Rate, l.Burst), newPacer(l.ContextRate, l.ContextBurst)
		n := 0
		for lines.Scan() {
			n++
			line := bytes.TrimSpace(lines.Bytes())
			if len(line) == 0 {
				continue
			}
			b, id, inContext, err := fillLine(line, &sf, to, ctxJSON)
			if err != nil {
				_ = s.wait(r, sf.wait) // report what the lines before it got
				return usagef("line %d of standard input: %v; it and the lines after it were not sent", n, err)
			}
			if inContext {
				if err := ctxPace.take(ctx); err != nil {
					return err
				}
			}
			if err := sendPace.take(ctx); err != nil {
				return err
			}
			s.track(id, fmt.Sprintf("line %d", n))
			if err := r.write(ctx, b); err != nil {
				return err
			}
		}
		if err := lines.Err(); err != nil {
			s.wait(r, sf.wait)
			return fmt.Errorf("reading standard input: %v", err)
		}
	}
	if err := s.wait(r, sf.wait); err != nil {
		return err
	}
	if s.failures() > 0 {
		return errReported
	}
	return nil
}

// sender collects the gateway's errors about the envelopes sent.
type sender struct {
	mu        sync.Mutex
	stderr    io.Writer
	sent      map[string]string // envelope id -> where it came from ("line 3")
	errors    int
	barrierID string
	barrier   chan struct{} // closed when the barrier's answer comes
	once      sync.Once
}

// welcomeLimits are the limits of the welcome that --stdin paces itself by.
type welcomeLimits struct {
	Rate         float64 `json:"rate"`
	Burst        float64 `json:"burst"`
	ContextRate  float64 `json:"context_rate"`
	ContextBurst float64 `json:"context_burst"`
}

func (s *sender) track(id, where string) {
	s.mu.Lock()
	s.sent[id] = where
	s.mu.Unlock()
}

func (s *sender) failures() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.errors
}

// handle runs on the reading goroutine for every envelope received.
func (s *sender) handle(line []byte) {
	h, ok := parseHeader(line)
	if !ok {
		return
	}
	if h.correlates(s.barrierID) {
		s.once.Do(func() { close(s.barrier) })
		return // an error about the barrier itself (rate_limited) is not the user's
	}
	if h.Kind != "system/error" {
		return
	}
	// The connection receives nothing broadcast, so every error is about
	// an envelope it sent.
	var ge gatewayError
	_ = json.Unmarshal(h.Payload, &ge)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errors++
	about := ""
	for _, id := range h.correlationIDs() {
		if where, ok := s.sent[id]; ok {
			about = " (envelope " + id
			if where != "" {
				about += ", " + where
			}
			about += ")"
		}
	}
	fmt.Fprintf(s.stderr, "mcpp send: refused: %s%s\n", ge, about)
}

// wait sends the barrier and waits up to d for its answer.
func (s *sender) wait(r *request, d time.Duration) error {
	b, _ := json.Marshal(outEnvelope{ID: s.barrierID, Kind: "gateway/filter", Payload: json.RawMessage(`{}`)})
	if err := r.write(context.Background(), b); err != nil {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.barrier:
		return nil
	case <-t.C:
		return nil // no news is good news
	case <-r.done:
		select {
		case <-s.barrier:
			return nil
		default:
		}
		return closeError(r.err)
	}
}

// contextFlag turns --context into JSON: an object as given, or a path as
// a JSON string. The gateway judges the syntax.
func contextFlag(v string) (json.RawMessage, error) {
	if strings.HasPrefix(strings.TrimSpace(v), "{") {
		if !json.Valid([]byte(v)) {
			return nil, usagef("--context starts with { but is not valid JSON: %s", v)
		}
		return json.RawMessage(v), nil
	}
	b, _ := json.Marshal(v)
	return b, nil
}

// payloadFlag reads --payload: JSON, @FILE or - (standard input).
func payloadFlag(v string, stdin io.Reader) (json.RawMessage, error) {
	var data []byte
	var from string
	switch {
	case v == "-":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading the payload from standard input: %v", err)
		}
		data, from = b, "standard input"
	case strings.HasPrefix(v, "@"):
		b, err := os.ReadFile(v[1:])
		if err != nil {
			return nil, usagef("--payload %s: %v", v, err)
		}
		data, from = b, v[1:]
	default:
		data, from = []byte(v), "--payload"
	}
	data = bytes.TrimSpace(data)
	if !json.Valid(data) {
		hint := ""
		if from == "--payload" {
			hint = `; to send a string, quote it: --payload '"text"'`
		}
		return nil, usagef("the payload in %s is not valid JSON%s", from, hint)
	}
	return data, nil
}

// fillLine checks that line is one JSON object and adds the fields it
// lacks: an id, and those of --kind, --to, --context, --correlation-id.
// The line's own bytes are kept; the new fields go first.
func fillLine(line []byte, sf *sendFlags, to []string, ctxJSON json.RawMessage) (out []byte, id string, inContext bool, err error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil || fields == nil {
		return nil, "", false, errors.New("not a JSON object")
	}
	_, inContext = fields["context"]
	inContext = inContext || ctxJSON != nil
	var add []string
	addField := func(name string, v any) {
		b, _ := json.Marshal(v)
		add = append(add, fmt.Sprintf("%q:%s", name, b))
	}
	if raw, ok := fields["id"]; ok {
		_ = json.Unmarshal(raw, &id) // a non-string id is the gateway's to refuse
	} else {
		id = newID()
		addField("id", id)
	}
	if _, ok := fields["kind"]; !ok && sf.kind != "" {
		addField("kind", sf.kind)
	}
	if _, ok := fields["to"]; !ok && len(to) > 0 {
		addField("to", to)
	}
	if _, ok := fields["context"]; !ok && ctxJSON != nil {
		addField("context", ctxJSON)
	}
	if _, ok := fields["correlation_id"]; !ok && sf.correlationID != "" {
		addField("correlation_id", sf.correlationID)
	}
	if len(add) == 0 {
		return line, id, inContext, nil
	}
	rest := bytes.TrimSpace(line[1:]) // after the opening {
	var b bytes.Buffer
	b.WriteByte('{')
	b.WriteString(strings.Join(add, ","))
	if len(rest) > 0 && rest[0] != '}' {
		b.WriteByte(',')
	}
	b.Write(rest)
	return b.Bytes(), id, inContext, nil
}

// pacer is a token bucket a little slower than the gateway's, so that a
// stream of lines is not refused with rate_limited. It starts empty: the
// gateway's bucket may have been drained by an earlier connection of the
// same participant.
type pacer struct {
	rate, capacity, tokens float64
	last                   time.Time
}

// newPacer paces at 90% of rate with half the burst; a rate of 0 (not
// announced) does not pace.
func newPacer(rate, burst float64) *pacer {
	if rate <= 0 {
		return nil
	}
	return &pacer{rate: rate * 0.9, capacity: max(1, burst/2), last: time.Now()}
}

// take waits for a token.
func (p *pacer) take(ctx context.Context) error {
	if p == nil {
		return nil
	}
	now := time.Now()
	p.tokens = min(p.capacity, p.tokens+now.Sub(p.last).Seconds()*p.rate)
	p.last = now
	if p.tokens < 1 {
		d := time.Duration((1 - p.tokens) / p.rate * float64(time.Second))
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		p.tokens = 1
		p.last = time.Now()
	}
	p.tokens--
	return nil
}

// splitList splits a comma-separated flag, dropping empty entries.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
