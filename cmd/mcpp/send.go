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
	"math"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"golang.org/x/time/rate"

	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/wire"
)

var sendCommand = command{
	synopsis: "--pod NAME --kind KIND [--to a,b] [--context JSON|PATH] [--payload JSON|@FILE|-] [--id ID]\n       mcpp send --pod NAME --stdin [--kind KIND] [--to a,b] [--context JSON|PATH] [--rate N]",
	summary:  "Send one envelope, or one per line of standard input, without joining the pod.",
	usage: `send does not join the pod: it POSTs to /pods/NAME/envelopes
(docs/protocol.md section 6), so nobody in the pod sees a join or a leave,
and the gateway answers each envelope in its HTTP answer. Each envelope is
checked and relayed as if the participant had sent it over WebSocket (its
own tails with --echo get it too).

Envelope flags:
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
                          non-empty line is a whole envelope JSON object,
                          sent as it is. A line without an id gets a new
                          one; --kind, --to, --context and --correlation-id
                          fill the fields a line lacks. --payload and --id
                          do not apply. Lines go one a request, in order.
  --rate N                with --stdin, send at most N lines a second
                          (default 90, under the gateway's default --rate
                          of 100; 0 does not pace). Lines are paced from
                          the start, as if the gateway's bucket were empty
  --context-rate N        with --stdin, at most N lines a second that have
                          a context (default 45, under the gateway's
                          default --context-rate of 50)
                          A line the gateway refuses as rate_limited or
                          context_rate_limited all the same (a gateway with
                          lower limits) is sent again once its
                          retry_after_ms has passed.
  --wait DURATION         how long to wait for the gateway's answer to each
                          request (default 10s; 0: no limit). The answer
                          holds the gateway's verdict on every envelope of
                          the request, so nothing comes after it.

Each refused envelope is printed on standard error (code and message, with
the envelope id, and the line with --stdin), and send exits 1; otherwise it
exits 0. Without --participant, in open mode, send uses a new id
anon-XXXXXXXXXXXX each time.
`,
	run: runSend,
}

type sendFlags struct {
	kind, to, context, payload, id, correlationID string
	stdin                                         bool
	wait                                          time.Duration
	rate, contextRate                             float64
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
	fs.DurationVar(&sf.wait, "wait", 10*time.Second, "")
	fs.Float64Var(&sf.rate, "rate", 90, "")
	fs.Float64Var(&sf.contextRate, "context-rate", 45, "")
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
	if sf.rate < 0 || sf.contextRate < 0 || math.IsNaN(sf.rate) || math.IsNaN(sf.contextRate) {
		return usagef("--rate and --context-rate must be 0 (no pacing) or more")
	}
	var ctxJSON json.RawMessage
	if given["context"] {
		var err error
		if ctxJSON, err = contextFlag(sf.context); err != nil {
			return err
		}
	}
	to := splitList(sf.to)
	s := &sender{e: e, cf: &cf, sf: &sf}
	s.opts = cf.publishOptions()

	if sf.stdin {
		if given["payload"] || given["id"] {
			return usagef("--payload and --id do not apply to --stdin: each line is a whole envelope")
		}
		return s.lines(ctx, to, ctxJSON)
	}
	if sf.kind == "" {
		return usagef("--kind is required")
	}
	env := &wire.Envelope{ID: sf.id, To: to, Kind: sf.kind, Context: ctxJSON}
	if sf.correlationID != "" {
		env.CorrelationID = wire.CorrelationID{sf.correlationID}
	}
	if env.ID == "" {
		env.ID = uuid.NewString()
	}
	if given["payload"] {
		p, err := payloadFlag(sf.payload, e.stdin)
		if err != nil {
			return err
		}
		env.Payload = p
	}
	b, err := json.Marshal(env)
	if err != nil {
		return usagef("%v", err)
	}
	r, err := s.publish(ctx, b)
	if err != nil {
		return err
	}
	if r.Error != nil {
		s.refused(r, env.ID, "")
		return errReported
	}
	return nil
}

// sender publishes what send sends.
type sender struct {
	e    *env
	cf   *connFlags
	sf   *sendFlags
	opts client.PublishOptions
}

// publish POSTs one envelope and returns the gateway's verdict on it.
func (s *sender) publish(ctx context.Context, b []byte) (wire.PublishResult, error) {
	rctx, cancel := withTimeout(ctx, s.sf.wait)
	defer cancel()
	res, err := client.PublishRaw(rctx, s.cf.endpoint(), s.opts, b)
	if err != nil {
		return wire.PublishResult{}, s.cf.explain(ctx, err, "request")
	}
	return res[0], nil
}

// refused reports a refused envelope.
func (s *sender) refused(r wire.PublishResult, id, where string) {
	if id == "" {
		id = r.ID
	}
	var about []string
	if id != "" {
		about = append(about, "envelope "+id)
	}
	if where != "" {
		about = append(about, where)
	}
	msg := r.Error.String()
	if len(about) > 0 {
		msg += " (" + strings.Join(about, ", ") + ")"
	}
	fmt.Fprintf(s.e.stderr, "mcpp send: refused: %s\n", msg)
}

// maxRateRetries bounds how often one line refused for a rate is sent
// again.
const maxRateRetries = 20

// lines sends one envelope per line of standard input, paced.
func (s *sender) lines(ctx context.Context, to []string, ctxJSON json.RawMessage) error {
	sc := bufio.NewScanner(s.e.stdin)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	sendPace, ctxPace := newLimiter(s.sf.rate), newLimiter(s.sf.contextRate)
	failures, n := 0, 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		b, id, inContext, err := fillLine(line, s.sf, to, ctxJSON)
		if err != nil {
			return usagef("line %d of standard input: %v; it and the lines after it were not sent", n, err)
		}
		where := fmt.Sprintf("line %d", n)
		for attempt := 0; ; attempt++ {
			if inContext {
				if err := wait(ctx, ctxPace); err != nil {
					return err
				}
			}
			if err := wait(ctx, sendPace); err != nil {
				return err
			}
			r, err := s.publish(ctx, b)
			if err != nil {
				if errors.Is(err, context.Canceled) {
					return err
				}
				return fmt.Errorf("%v; %s may or may not have been sent, and the lines after it were not", err, where)
			}
			if r.Error != nil && attempt < maxRateRetries &&
				(r.Error.Code == wire.CodeRateLimited || r.Error.Code == wire.CodeContextRateLimited) {
				d := time.Duration(r.Error.RetryAfterMS) * time.Millisecond
				if err := sleep(ctx, max(d, 10*time.Millisecond)); err != nil {
					return err
				}
				continue
			}
			if r.Error != nil {
				failures++
				s.refused(r, id, where)
			}
			break
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading standard input: %v", err)
	}
	if failures > 0 {
		return errReported
	}
	return nil
}

// newLimiter paces at r a second (golang.org/x/time/rate), with a burst
// of one second's worth. It starts empty: the gateway's bucket for this
// participant may have been drained by an earlier send. r = 0 does not
// pace (nil).
func newLimiter(r float64) *rate.Limiter {
	if r <= 0 {
		return nil
	}
	burst := max(1, int(math.Ceil(r)))
	l := rate.NewLimiter(rate.Limit(r), burst)
	l.AllowN(time.Now(), burst)
	return l
}

// wait waits for a token of l (nil: none needed).
func wait(ctx context.Context, l *rate.Limiter) error {
	if l == nil {
		return nil
	}
	return l.Wait(ctx)
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
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
		id = uuid.NewString()
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
