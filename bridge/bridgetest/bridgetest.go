// Package bridgetest calls the MCP servers of a pod as a participant
// does, for the tests of mcpp bridge (package bridge, and
// integration/bridge_test.go): a Requester sends mcp/request envelopes to
// one participant and collects the mcp/response answers by their
// correlation_id, and the mcp/notification envelopes that reach it. It is
// built on the public client (package client), over a real gateway.
package bridgetest

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/wire"
)

// Wait bounds every wait of a Requester: long for a loaded CI machine,
// never reached when things work.
const Wait = 10 * time.Second

// Requester is a participant that calls bridged servers through the pod.
type Requester struct {
	tb testing.TB
	c  *client.Client
	id string

	mu       sync.Mutex
	answers  map[string]chan *wire.Envelope       // by the request's envelope id
	refusals map[string]chan *client.GatewayError // by the refused envelope's id
	stray    []*wire.Envelope                     // answers to it, but to no request it made
	// Notes are the mcp/notification envelopes that reach it.
	Notes chan *wire.Envelope
	// Questions are the mcp/request envelopes addressed to it: what a
	// server asks its caller through its bridge (Reply answers one).
	Questions chan *wire.Envelope
	errs      chan *client.GatewayError // refusals of envelopes sent otherwise than by Send
	joined    chan string               // the ids of presence join events
}

// Dial joins pod as participant id (open mode) at the gateway's wsURL,
// until the test ends.
func Dial(tb testing.TB, wsURL, pod, id string) *Requester {
	tb.Helper()
	return DialWith(tb, wsURL, client.Options{Pod: pod, Participant: id})
}

// DialWith joins with opts (a Token, say) until the test ends.
func DialWith(tb testing.TB, wsURL string, opts client.Options) *Requester {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	c, err := client.Dial(ctx, wsURL, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	r := &Requester{
		tb: tb, c: c, id: c.ID(), answers: map[string]chan *wire.Envelope{}, refusals: map[string]chan *client.GatewayError{},
		Notes: make(chan *wire.Envelope, 1024), Questions: make(chan *wire.Envelope, 64), errs: make(chan *client.GatewayError, 64), joined: make(chan string, 64),
	}
	go r.read()
	return r
}

// ID is the requester's participant id.
func (r *Requester) ID() string { return r.id }

// Client is the requester's client.
func (r *Requester) Client() *client.Client { return r.c }

func (r *Requester) read() {
	for {
		ev, err := r.c.Next(context.Background())
		if err != nil {
			return
		}
		if p, ok := ev.(*client.Presence); ok && p.Event == wire.PresenceJoin {
			r.joined <- p.Participant.ID
		}
		if ge, ok := ev.(*client.GatewayError); ok {
			r.mu.Lock()
			ch := r.refusals[ge.RefusedID()]
			r.mu.Unlock()
			if ch != nil {
				ch <- ge
			} else {
				select {
				case r.errs <- ge:
				default:
				}
			}
		}
		m, ok := ev.(*client.Message)
		if !ok {
			continue
		}
		switch {
		// A participant watching the pod sees the others' answers too:
		// only those addressed to it are its own.
		case wire.IsMCPResponse(m.Kind) && slices.Contains(m.To, r.id):
			r.mu.Lock()
			ch := r.answers[strings.Join(m.CorrelationID, ",")]
			if ch == nil {
				r.stray = append(r.stray, m.Envelope)
			}
			r.mu.Unlock()
			if ch != nil {
				ch <- m.Envelope
			}
		case m.Kind == wire.KindMCPNotification:
			r.Notes <- m.Envelope
		case wire.IsMCPRequest(m.Kind) && slices.Contains(m.To, r.id):
			r.Questions <- m.Envelope
		}
	}
}

// Errors receives the gateway's refusals of the envelopes the requester
// sent through its Client rather than with Send or ReplyRaw.
func (r *Requester) Errors() <-chan *client.GatewayError { return r.errs }

// Question waits for the next question addressed to the requester that
// is a request (with an id), and returns it; notifications about earlier
// questions (their cancellation) are skipped.
func (r *Requester) Question() *wire.Envelope {
	r.tb.Helper()
	deadline := time.After(Wait)
	for {
		select {
		case q := <-r.Questions:
			var p struct {
				ID json.RawMessage `json:"id"`
			}
			if json.Unmarshal(q.Payload, &p) == nil && p.ID != nil {
				return q
			}
		case <-deadline:
			r.tb.Fatalf("%s was asked nothing within %v", r.id, Wait)
			return nil
		}
	}
}

// Reply answers question q with result (JSON), as its asker expects: an
// mcp/response to it alone, correlated to it, with the question's
// JSON-RPC id.
func (r *Requester) Reply(q *wire.Envelope, result string) {
	r.tb.Helper()
	var p struct {
		ID json.RawMessage `json:"id"`
	}
	_ = json.Unmarshal(q.Payload, &p)
	r.ReplyRaw(q, `{"jsonrpc":"2.0","id":`+string(p.ID)+`,"result":`+result+`}`)
}

// ReplyRaw sends payload as the answer to question q.
func (r *Requester) ReplyRaw(q *wire.Envelope, payload string) *Pending {
	r.tb.Helper()
	p := &Pending{r: r, ID: uuid.NewString(), Answers: make(chan *wire.Envelope, 4), Refusals: make(chan *client.GatewayError, 4)}
	r.mu.Lock()
	r.refusals[p.ID] = p.Refusals
	r.mu.Unlock()
	env := &wire.Envelope{ID: p.ID, Kind: wire.KindMCPResponse, To: []string{q.From}, CorrelationID: wire.CorrelationID{q.ID},
		Context: q.Context, Payload: json.RawMessage(payload)}
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	if _, err := r.c.Send(ctx, env); err != nil {
		r.tb.Fatal(err)
	}
	return p
}

// Pending is a request sent, whose answer comes on Answers.
type Pending struct {
	r *Requester
	// ID is the mcp/request envelope's id.
	ID string
	// Answers receives the answers correlated to it: one, if all goes
	// well.
	Answers chan *wire.Envelope
	// Refusals receives the gateway's refusal of the request, if it
	// refused it.
	Refusals chan *client.GatewayError
}

// Send sends an mcp/request with payload (JSON) to participant to.
func (r *Requester) Send(to, payload string) *Pending {
	r.tb.Helper()
	return r.SendIn(nil, to, payload)
}

// SendIn is Send with the request in context cx.
func (r *Requester) SendIn(cx json.RawMessage, to, payload string) *Pending {
	r.tb.Helper()
	p := &Pending{r: r, ID: uuid.NewString(), Answers: make(chan *wire.Envelope, 4), Refusals: make(chan *client.GatewayError, 4)}
	r.mu.Lock()
	r.answers[p.ID] = p.Answers
	r.refusals[p.ID] = p.Refusals
	r.mu.Unlock()
	env := &wire.Envelope{ID: p.ID, Kind: wire.KindMCPRequest, To: []string{to}, Context: cx, Payload: json.RawMessage(payload)}
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	if _, err := r.c.Send(ctx, env); err != nil {
		r.tb.Fatal(err)
	}
	return p
}

// Call sends a request and waits for its answer.
func (r *Requester) Call(to, payload string) Answer {
	r.tb.Helper()
	return r.Send(to, payload).Await()
}

// Await waits for the request's answer and checks its envelope: an
// mcp/response to the requester alone, correlated to the request. A
// refusal of the gateway fails the test.
func (p *Pending) Await() Answer {
	p.r.tb.Helper()
	a, refused := p.Outcome()
	if refused != nil {
		p.r.tb.Fatalf("the gateway refused %s: %v", p.ID, refused)
	}
	return a
}

// Outcome waits for the request's answer, as Await, or for the gateway's
// refusal of it.
func (p *Pending) Outcome() (Answer, *client.GatewayError) {
	r := p.r
	r.tb.Helper()
	select {
	case ge := <-p.Refusals:
		return Answer{}, ge
	case env := <-p.Answers:
		if env.Kind != wire.KindMCPResponse || len(env.To) != 1 || env.To[0] != r.id || len(env.CorrelationID) != 1 || env.CorrelationID[0] != p.ID {
			r.tb.Fatalf("the answer to %s: kind %s, to %v, correlation_id %v; want mcp/response to [%s], correlation_id %s",
				p.ID, env.Kind, env.To, env.CorrelationID, r.id, p.ID)
		}
		var a Answer
		if err := json.Unmarshal(env.Payload, &a); err != nil {
			r.tb.Fatalf("the answer to %s: %v: %s", p.ID, err, env.Payload)
		}
		a.Envelope = env
		return a, nil
	case <-time.After(Wait):
		r.tb.Fatalf("%s: no answer to %s within %v", r.id, p.ID, Wait)
	}
	return Answer{}, nil
}

// Stray returns the answers addressed to the requester that answer no
// request it made.
func (r *Requester) Stray() []*wire.Envelope {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.stray)
}

// AwaitJoin waits for the presence event of id's join.
func (r *Requester) AwaitJoin(id string) {
	r.tb.Helper()
	deadline := time.After(Wait)
	for {
		select {
		case got := <-r.joined:
			if got == id {
				return
			}
		case <-deadline:
			r.tb.Fatalf("%s did not join within %v", id, Wait)
		}
	}
}

// AwaitUp pings the bridge bridgeID, which is in the pod, until its
// server answers: until then its answer is a server_down error.
func (r *Requester) AwaitUp(bridgeID string) {
	r.tb.Helper()
	deadline := time.Now().Add(Wait)
	for {
		a := r.Call(bridgeID, `{"jsonrpc": "2.0", "id": "up?", "method": "ping"}`)
		if a.Error == nil {
			return
		}
		if a.Reason() != wire.MCPReasonServerDown || time.Now().After(deadline) {
			r.tb.Fatalf("the server of %s did not come up within %v: %s", bridgeID, Wait, a.Envelope.Payload)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Notification waits for the next mcp/notification whose payload's method
// is method, skipping others.
func (r *Requester) Notification(method string) *wire.Envelope {
	r.tb.Helper()
	deadline := time.After(Wait)
	for {
		select {
		case n := <-r.Notes:
			var m struct{ Method string }
			if json.Unmarshal(n.Payload, &m) == nil && m.Method == method {
				return n
			}
		case <-deadline:
			r.tb.Fatalf("%s: no %s notification within %v", r.id, method, Wait)
			return nil
		}
	}
}

// Answer is the payload of an mcp/response: a JSON-RPC response.
type Answer struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
	// Envelope is the mcp/response.
	Envelope *wire.Envelope `json:"-"`
}

// Text is the text of a tools/call result's first content item, failing
// the test when the answer is no such result.
func (a Answer) Text(tb testing.TB) string {
	tb.Helper()
	var res struct {
		Content []struct{ Text string } `json:"content"`
	}
	if a.Error != nil || json.Unmarshal(a.Result, &res) != nil || len(res.Content) == 0 {
		tb.Fatalf("not a tool's result with content: %s", a.Envelope.Payload)
	}
	return res.Content[0].Text
}

// IsToolError reports whether the answer is a tool's result with isError.
func (a Answer) IsToolError() bool {
	var res struct {
		IsError bool `json:"isError"`
	}
	return a.Error == nil && json.Unmarshal(a.Result, &res) == nil && res.IsError
}

// Reason is the data's reason of an error answer, or "".
func (a Answer) Reason() string {
	if a.Error == nil {
		return ""
	}
	var d struct{ Reason string }
	_ = json.Unmarshal(a.Error.Data, &d)
	return d.Reason
}

// ToolCall is the payload of a tools/call request of JSON-RPC id id.
func ToolCall(id any, name string, args any) string {
	b, err := json.Marshal(map[string]any{
		"jsonrpc": "2.0", "id": id, "method": "tools/call",
		"params": map[string]any{"name": name, "arguments": args},
	})
	if err != nil {
		panic(err)
	}
	return string(b)
}
