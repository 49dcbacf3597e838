package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/wire"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// The welcome is the first event, and what Welcome and ID return.
func TestWelcome(t *testing.T) {
	url := startGateway(t, nil)
	bob := dial(t, url, Options{Pod: "w", Participant: "bob"})
	alice := dial(t, url, Options{Pod: "w", Participant: "alice", Filter: &wire.Filter{Contexts: wire.ContextsNone}})
	w := expect[*Welcome](t, alice)
	if w.You.ID != "alice" || w.Pod != "w" || len(w.Participants) != 1 || w.Participants[0].ID != "bob" ||
		w.Envelope.From != wire.GatewayID || w.Limits.MaxMessageBytes != 1<<20 || w.History != nil {
		t.Fatalf("welcome %+v", w.Welcome)
	}
	if w.Filter.Contexts != wire.ContextsNone || w.Filter.Main == nil || !*w.Filter.Main {
		t.Fatalf("the filter asked for is not in effect: %+v", w.Filter)
	}
	if alice.ID() != "alice" || alice.Welcome().Pod != "w" {
		t.Fatalf("ID %q Welcome %+v", alice.ID(), alice.Welcome())
	}
	expect[*Welcome](t, bob)
	ev, err := bob.Next(ctxT(t))
	if p, ok := ev.(*Presence); err != nil || !ok || p.Event != wire.PresenceJoin || p.Participant.ID != "alice" {
		t.Fatalf("bob: %T %+v %v, want alice's join", ev, ev, err)
	}
}

// An envelope goes from one client to the other, with its id and
// payload; the sender does not get it back.
func TestSendReceive(t *testing.T) {
	url := startGateway(t, nil)
	alice := dial(t, url, Options{Pod: "sr", Participant: "alice"})
	bob := dial(t, url, Options{Pod: "sr", Participant: "bob"})
	expect[*Welcome](t, alice)
	expect[*Welcome](t, bob)
	env := &wire.Envelope{Kind: "chat", To: []string{"bob"}, CorrelationID: wire.CorrelationID{"q-1"}, Payload: json.RawMessage(`{"text":"hello"}`)}
	id, err := alice.Send(ctxT(t), env)
	if err != nil || id == "" || env.ID != id {
		t.Fatalf("Send: %q %v (env.ID %q)", id, err, env.ID)
	}
	m := expect[*Message](t, bob)
	if m.ID != id || m.From != "alice" || m.Kind != "chat" || string(m.Payload) != `{"text":"hello"}` ||
		m.Protocol != wire.ProtocolMCPP || m.TS == "" || !m.CorrelationID.Has("q-1") || !slices.Equal(m.To, []string{"bob"}) {
		t.Fatalf("bob got %+v", m.Envelope)
	}
	if !strings.Contains(string(m.Raw), `"id":"`+id+`"`) {
		t.Fatalf("raw %s", m.Raw)
	}
	// An id chosen by the sender is kept.
	if id, err := bob.Send(ctxT(t), &wire.Envelope{ID: "mine-1", Kind: "chat"}); err != nil || id != "mine-1" {
		t.Fatalf("%q %v", id, err)
	}
	if m := expect[*Message](t, alice); m.ID != "mine-1" || m.From != "bob" {
		t.Fatalf("alice got %+v", m.Envelope)
	}
	if err := alice.Sync(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-alice.Events():
		if _, ok := ev.(*Presence); !ok {
			t.Fatalf("alice got %T %+v", ev, ev)
		}
	default:
	}
}

// With batch=1 several envelopes come in one WebSocket message; the
// client hands them out one by one, in order.
func TestBatch(t *testing.T) {
	url := startGateway(t, func(c *gateway.Config) { c.Rate, c.Burst, c.SendQueue = 1e5, 100000, 100000 })
	alice := dial(t, url, Options{Pod: "b", Participant: "alice"})
	// bob reads one event ahead only: while the test does not read, the
	// socket buffers fill, then the gateway's queue for him, which goes
	// out in batches (of at most 64 KiB) once he reads.
	bob := dial(t, url, Options{Pod: "b", Participant: "bob", Filter: &wire.Filter{Batch: wire.Bool(true)}, EventBuffer: 1})
	expect[*Welcome](t, bob)
	const n = 3000
	pad := strings.Repeat("x", 1<<10)
	for i := range n {
		p := fmt.Sprintf(`{"i":%d,"pad":%q}`, i, pad)
		if _, err := alice.Send(ctxT(t), &wire.Envelope{Kind: "seq", Payload: json.RawMessage(p)}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	before := bob.reads.Load()
	for i := range n {
		m := expect[*Message](t, bob)
		var p struct{ I int }
		if err := m.DecodePayload(&p); err != nil || p.I != i {
			t.Fatalf("envelope %d: %+v %v", i, p, err)
		}
		if strings.Contains(string(m.Raw), "\n") {
			t.Fatal("a line holds a newline")
		}
	}
	if msgs := bob.reads.Load(); msgs >= n {
		t.Fatalf("%d envelopes came in %d WebSocket messages (%d before reading): not batched", n, msgs, before)
	} else {
		t.Logf("%d envelopes came in %d WebSocket messages", n, msgs)
	}
}

// Requests are matched to their answers by correlation_id, also when
// several are in flight; answers are not handed out as events.
func TestRequest(t *testing.T) {
	url := startGateway(t, nil)
	alice := dial(t, url, Options{Pod: "rq", Participant: "alice", Filter: &wire.Filter{Echo: wire.Bool(true)}})
	expect[*Welcome](t, alice)
	for _, id := range []string{"r1", "r2"} {
		if _, err := alice.Send(ctxT(t), &wire.Envelope{Kind: "reasoning/step", Context: wire.Context{ID: id, Type: "reasoning"}.JSON()}); err != nil {
			t.Fatal(err)
		}
		expect[*Message](t, alice) // echo
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				list, err := alice.Contexts(ctxT(t), wire.ContextsRequest{ID: "r2"})
				if err != nil || len(list) != 1 || list[0].ID != "r2" || list[0].Creator != "alice" || list[0].Messages != 1 {
					t.Errorf("Contexts: %+v %v", list, err)
				}
				return
			}
			ans, err := alice.Request(ctxT(t), wire.RequestContexts, nil)
			var a wire.ContextsAnswer
			if err != nil || ans.Kind != wire.KindContexts || ans.DecodePayload(&a) != nil || len(a.Contexts) != 2 {
				t.Errorf("Request: %+v %v", ans, err)
			}
		}()
	}
	wg.Wait()
	f, err := alice.SetFilter(ctxT(t), wire.Filter{Contexts: wire.ContextsNone, Types: []string{"reasoning"}})
	if err != nil || f.Contexts != wire.ContextsNone || !slices.Equal(f.Types, []string{"reasoning"}) || !*f.Echo {
		t.Fatalf("SetFilter: %+v %v", f, err)
	}
	// The filter applies: a context of another type is not delivered.
	_, _ = alice.Send(ctxT(t), &wire.Envelope{Kind: "plan", Context: wire.Context{ID: "p1", Type: "plan"}.JSON()})
	_, _ = alice.Send(ctxT(t), &wire.Envelope{Kind: "main"})
	if m := expect[*Message](t, alice); m.Kind != "main" {
		t.Fatalf("got %s", m.Kind)
	}
	// And is the one a reconnection would ask for.
	if q := alice.dialURL("", false); !strings.Contains(q, "types=reasoning") || !strings.Contains(q, "contexts=none") {
		t.Fatalf("reconnection URL %s", q)
	}
	if _, err := alice.Request(ctxT(t), "chat", nil); err == nil {
		t.Fatal("Request took a kind that is not gateway/*")
	}
	select {
	case ev := <-alice.Events():
		t.Fatalf("an answer came as an event: %T %+v", ev, ev)
	default:
	}
}

// Refusals are Go errors: a refused request is returned as a
// *GatewayError, a refused envelope comes as a *GatewayError event.
func TestErrors(t *testing.T) {
	url := startGateway(t, nil)
	alice := dial(t, url, Options{Pod: "e", Participant: "alice"})
	expect[*Welcome](t, alice)

	_, err := alice.Request(ctxT(t), "gateway/nope", nil)
	var ge *GatewayError
	if !errors.As(err, &ge) || ge.Code != wire.CodeUnknownRequest || ge.Retryable || ge.Envelope.From != wire.GatewayID {
		t.Fatalf("unknown request: %v", err)
	}
	if !IsCode(err, wire.CodeUnknownRequest) || IsCode(err, wire.CodeInvalidJSON) {
		t.Fatal("IsCode")
	}
	_, err = alice.Contexts(ctxT(t), wire.ContextsRequest{State: "bogus"})
	if !IsCode(err, wire.CodeInvalidEnvelope) {
		t.Fatalf("bad state: %v", err)
	}

	id, err := alice.Send(ctxT(t), &wire.Envelope{Kind: "system/x"})
	if err != nil {
		t.Fatal(err)
	}
	if err := alice.Sync(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-alice.Events():
		ge, ok := ev.(*GatewayError)
		if !ok || ge.Code != wire.CodeReservedKind || ge.RefusedID() != id || !strings.Contains(ge.Error(), "reserved_kind") {
			t.Fatalf("got %T %+v", ev, ev)
		}
	default:
		t.Fatal("the refusal had not come by the time Sync returned")
	}
	// capability_violation carries its details.
	url2 := startGateway(t, func(c *gateway.Config) { c.DefaultCapabilities = "chat" })
	bob := dial(t, url2, Options{Pod: "e", Participant: "bob"})
	expect[*Welcome](t, bob)
	_, _ = bob.Send(ctxT(t), &wire.Envelope{Kind: "mcp/request:tools/call"})
	ge = expect[*GatewayError](t, bob)
	if ge.Code != wire.CodeCapabilityViolation || ge.AttemptedKind != "mcp/request:tools/call" || fmt.Sprint(ge.YourCapabilities) != fmt.Sprint(wire.Kinds("chat")) {
		t.Fatalf("%+v", ge.ErrorPayload)
	}
}

// An upgrade the gateway refuses is a *RefusedError with its status and
// code; a token is sent as a Bearer token.
func TestRefused(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	err := os.WriteFile(tokens, []byte(`{"tokens": [{"token": "s3cr3t", "participant": "alice", "capabilities": ["chat"], "pods": ["lab"]}]}`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	url := startGateway(t, func(c *gateway.Config) { c.Tokens = tokens })
	for _, tc := range []struct {
		pod, token string
		status     int
		code       wire.Code
	}{
		{"bad pod!", "s3cr3t", 400, wire.CodeInvalidPod},
		{"lab", "", 401, wire.CodeUnauthorized},
		{"lab", "wrong", 401, wire.CodeUnauthorized},
		{"other", "s3cr3t", 403, wire.CodeForbidden},
	} {
		_, err := Dial(ctxT(t), url, Options{Pod: tc.pod, Token: tc.token})
		var re *RefusedError
		if !errors.As(err, &re) || re.StatusCode != tc.status || re.Code != tc.code || re.Message == "" || re.Temporary() {
			t.Errorf("pod %q token %q: %v, want HTTP %d %s", tc.pod, tc.token, err, tc.status, tc.code)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("the token is in the error: %v", err)
		}
	}
	c := dial(t, url, Options{Pod: "lab", Token: "s3cr3t", Participant: "ignored"})
	if w := expect[*Welcome](t, c); w.You.ID != "alice" || fmt.Sprint(w.You.Capabilities) != fmt.Sprint(wire.Kinds("chat")) {
		t.Fatalf("%+v", w.You)
	}
	// A token in the URL is hidden from errors.
	_, err = Dial(ctxT(t), "ws://127.0.0.1:1/ws?token=t0ps3cret", Options{Pod: "lab"})
	if err == nil || strings.Contains(err.Error(), "t0ps3cret") {
		t.Fatalf("%v", err)
	}
	if _, err := Dial(ctxT(t), url, Options{}); err == nil {
		t.Fatal("no pod")
	}
	if _, err := Dial(ctxT(t), "ftp://x", Options{Pod: "p"}); err == nil {
		t.Fatal("ftp")
	}
}

// Branch opens a context, Conclude concludes it, and the system/context
// event follows the conclusion, to the sender too.
func TestBranchConclude(t *testing.T) {
	url := startGateway(t, nil)
	alice := dial(t, url, Options{Pod: "bc", Participant: "alice"})
	bob := dial(t, url, Options{Pod: "bc", Participant: "bob"})
	expect[*Welcome](t, alice)
	expect[*Welcome](t, bob)
	r, err := alice.Branch(ctxT(t), "", "task-1", "compare the two plans")
	if err != nil || r.Type != "reasoning" || r.Parent != "task-1" || len(r.ID) != 36 {
		t.Fatalf("Branch: %+v %v", r, err)
	}
	m := expect[*Message](t, bob)
	var b wire.Branch
	if m.Kind != wire.KindContextBranch || m.ContextID() != r.ID || m.DecodePayload(&b) != nil || b.Description != "compare the two plans" {
		t.Fatalf("bob got %+v", m.Envelope)
	}
	_, _ = alice.Send(ctxT(t), &wire.Envelope{Kind: "reasoning/step", Context: r.JSON(), Payload: json.RawMessage(`{"step":1}`)})
	expect[*Message](t, bob)
	id, err := alice.Conclude(ctxT(t), r.ID, "plan B is cheaper")
	if err != nil {
		t.Fatal(err)
	}
	m = expect[*Message](t, bob)
	var cl wire.Conclusion
	if m.ID != id || m.Kind != wire.KindConclusion || m.ContextID() != r.ID || m.DecodePayload(&cl) != nil || cl.Summary != "plan B is cheaper" {
		t.Fatalf("bob got %+v", m.Envelope)
	}
	for _, c := range []*Client{bob, alice} {
		ev := expect[*ContextEvent](t, c)
		if ev.Context.ID != r.ID || ev.Context.Type != "reasoning" || ev.Context.Parent != "task-1" || ev.Reason != wire.ReasonConclusion ||
			ev.Event != wire.ContextConcluded || ev.Stats.Messages != 3 || !slices.Equal(ev.Stats.Participants, []string{"alice"}) || ev.Stats.Depth != 2 {
			t.Fatalf("%s got %+v", c.ID(), ev)
		}
	}
	list, err := alice.Contexts(ctxT(t), wire.ContextsRequest{State: wire.StateConcluded})
	if err != nil || len(list) != 1 || *list[0].Reason != wire.ReasonConclusion {
		t.Fatalf("%+v %v", list, err)
	}
}

// 4000 replaced ends the client, without reconnecting.
func TestReplaced(t *testing.T) {
	url := startGateway(t, nil)
	first := dial(t, url, Options{Pod: "rp", Participant: "alice"})
	expect[*Welcome](t, first)
	second := dial(t, url, Options{Pod: "rp", Participant: "alice"})
	expect[*Welcome](t, second)
	_, err := first.Next(ctxT(t))
	var ce *ClosedError
	if !errors.Is(err, ErrReplaced) || !errors.As(err, &ce) || ce.Code != wire.CloseReplaced {
		t.Fatalf("Next: %v", err)
	}
	if _, err := first.Send(ctxT(t), &wire.Envelope{Kind: "chat"}); !errors.Is(err, ErrReplaced) {
		t.Fatalf("Send after replaced: %v", err)
	}
	if first.Err() == nil {
		t.Fatal("Err is nil")
	}
}

// 1001 (the gateway shutting down) is an error that says so, when the
// client does not reconnect; Close ends everything with ErrClosed.
func TestGoingAwayAndClose(t *testing.T) {
	url, g := serveGateway(t, nil)
	c := dial(t, url, Options{Pod: "ga", Participant: "alice", Reconnect: Reconnect{Disable: true}})
	expect[*Welcome](t, c)
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = g.Shutdown(sctx)
	_, err := c.Next(ctxT(t))
	if !errors.Is(err, ErrGoingAway) || !strings.Contains(err.Error(), "shutting down") {
		t.Fatalf("Next: %v", err)
	}

	url2 := startGateway(t, nil)
	d := dial(t, url2, Options{Pod: "cl", Participant: "bob"})
	blocked := make(chan error, 1)
	go func() {
		for {
			if _, err := d.Next(context.Background()); err != nil {
				blocked <- err
				return
			}
		}
	}()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-blocked; !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
	if _, err := d.Send(ctxT(t), &wire.Envelope{Kind: "chat"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
	_ = d.Close() // twice is fine
}

// A lost connection is restored; with nothing to resume after, the
// client says there may be a gap; a Send made meanwhile waits for the
// new connection and then goes through.
func TestReconnectGap(t *testing.T) {
	url := startGateway(t, nil)
	p, purl := newProxy(t, url)
	alice := dial(t, url, Options{Pod: "rg", Participant: "alice"})
	bob := dial(t, purl, Options{Pod: "rg", Participant: "bob", Reconnect: Reconnect{MinDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond}})
	expect[*Welcome](t, alice)
	expect[*Welcome](t, bob)

	p.Refuse(true)
	p.Cut()
	eventually(t, 5*time.Second, "bob to see his connection end", func() bool { return !bob.connected() })
	sent := make(chan error, 1)
	go func() {
		_, err := bob.Send(ctxT(t), &wire.Envelope{Kind: "chat", Payload: json.RawMessage(`{"text":"while away"}`)})
		sent <- err
	}()
	select {
	case err := <-sent:
		t.Fatalf("Send returned %v while there was no connection", err)
	case <-time.After(300 * time.Millisecond):
	}
	p.Refuse(false)
	r := expect[*Reconnected](t, bob)
	if !r.Gap() || r.ResumedAfter != "" || !errors.Is(r.Cause, ErrDisconnected) || r.Attempts < 2 || r.Welcome.You.ID != "bob" {
		t.Fatalf("%+v", r)
	}
	if err := <-sent; err != nil {
		t.Fatalf("Send: %v", err)
	}
	if m := expect[*Message](t, alice); string(m.Payload) != `{"text":"while away"}` || m.From != "bob" {
		t.Fatalf("alice got %+v", m.Envelope)
	}
	// A request made while away is answered on the new connection.
	p.Refuse(true)
	p.Cut()
	eventually(t, 5*time.Second, "bob to see his connection end", func() bool { return !bob.connected() })
	answered := make(chan error, 1)
	go func() {
		_, err := bob.Contexts(ctxT(t), wire.ContextsRequest{})
		answered <- err
	}()
	time.Sleep(100 * time.Millisecond)
	p.Refuse(false)
	expect[*Reconnected](t, bob)
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	_, _ = alice.Send(ctxT(t), &wire.Envelope{Kind: "after"})
	if m := expect[*Message](t, bob); m.Kind != "after" {
		t.Fatalf("bob got %+v", m.Envelope)
	}
}

// The point of the package: the TCP connection under a receiver is cut
// in the middle of a burst, and the receiver still gets every envelope
// once, in order, because the client resumes (resume=, docs/protocol.md
// section 8).
func TestReconnectResume(t *testing.T) {
	url := startGateway(t, func(c *gateway.Config) { c.Rate, c.Burst = 1e5, 100000 })
	p, purl := newProxy(t, url)
	alice := dial(t, url, Options{Pod: "rs", Participant: "alice"})
	bob := dial(t, purl, Options{Pod: "rs", Participant: "bob", Reconnect: Reconnect{MinDelay: 20 * time.Millisecond, MaxDelay: 100 * time.Millisecond}})
	expect[*Welcome](t, alice)
	expect[*Welcome](t, bob)

	const n, cutAt = 300, 100
	go func() {
		for i := range n {
			p := fmt.Sprintf(`{"i":%d}`, i)
			if _, err := alice.Send(context.Background(), &wire.Envelope{Kind: "seq", Payload: json.RawMessage(p)}); err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	var got []int
	var rec *Reconnected
	for len(got) < n {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		ev, err := bob.Next(ctx)
		cancel()
		if err != nil {
			break // nothing more is coming
		}
		switch ev := ev.(type) {
		case *Message:
			var seq struct{ I int }
			if err := ev.DecodePayload(&seq); err != nil {
				t.Fatal(err)
			}
			got = append(got, seq.I)
			if len(got) == cutAt {
				p.Cut()
			}
		case *Reconnected:
			rec = ev
		}
	}
	if rec == nil {
		t.Fatal("no Reconnected event: the connection was not cut?")
	}
	missing, dups, outOfOrder := check(got, n)
	t.Logf("received %d envelopes of %d: %d missing, %d twice, %d out of order; reconnected after %d attempts, resumed %v after %s",
		len(got), n, missing, dups, outOfOrder, rec.Attempts, rec.Resumed, rec.ResumedAfter)
	if rec.ResumedAfter == "" {
		t.Errorf("the client asked for no resume")
	}
	if !rec.Resumed {
		if rec.Welcome.History == nil {
			t.Errorf("the gateway did not resume: its welcome carries no history object (resume= of docs/protocol.md section 8 is not implemented)")
		} else {
			t.Errorf("the gateway did not resume: welcome history %+v", *rec.Welcome.History)
		}
	}
	if missing+dups+outOfOrder > 0 {
		t.Errorf("the user did not get every envelope once, in order")
	}
}

// check counts what is wrong with got as the sequence 0 … n-1.
func check(got []int, n int) (missing, dups, outOfOrder int) {
	seen := map[int]int{}
	for i, v := range got {
		seen[v]++
		if i > 0 && v < got[i-1] {
			outOfOrder++
		}
	}
	for i := range n {
		switch seen[i] {
		case 0:
			missing++
		case 1:
		default:
			dups += seen[i] - 1
		}
	}
	return
}

// The URL of each connection: the filter, history and fold on the
// first, resume on the others, the token in a header.
func TestDialURL(t *testing.T) {
	c := &Client{opts: Options{History: HistoryAll, Fold: wire.Bool(false)}, filter: wire.Filter{Contexts: wire.ContextsNone, Types: []string{"a", "b"}}}
	base, secret, err := baseURL("http://h:1", &Options{Pod: "lab", Participant: "al", Protocol: wire.ProtocolMCPX})
	if err != nil || secret != "" {
		t.Fatal(err)
	}
	c.base = base
	u, _ := url.Parse(c.dialURL("", true))
	q := u.Query()
	if u.Scheme != "ws" || u.Path != "/ws" || q.Get("pod") != "lab" || q.Get("participant") != "al" || q.Get("protocol") != wire.ProtocolMCPX ||
		q.Get("contexts") != "none" || q.Get("types") != "a,b" || q.Get("history") != "all" || q.Get("fold") != "0" || q.Has("resume") {
		t.Fatalf("first: %s", u)
	}
	u, _ = url.Parse(c.dialURL("env-9", false))
	q = u.Query()
	if q.Get("resume") != "env-9" || q.Has("history") || q.Has("fold") || q.Get("contexts") != "none" {
		t.Fatalf("again: %s", u)
	}
	c.opts.History = 50
	if u, _ = url.Parse(c.dialURL("", true)); u.Query().Get("history") != "50" {
		t.Fatalf("%s", u)
	}
	if _, secret, _ := baseURL("wss://h/custom/ws?token=t%2F1", &Options{Pod: "p"}); secret != "t/1" {
		t.Fatalf("secret %q", secret)
	}
}

// The client's own dispatch: batches split, answers matched, the
// envelope handed out right before dropped, and the resume point set by
// what history keeps.
func TestDispatch(t *testing.T) {
	c := &Client{events: make(chan Event, 16), pending: map[string]chan *wire.Envelope{}, resent: map[string]struct{}{}}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	defer c.cancel()
	ans := make(chan *wire.Envelope, 1)
	c.pending["q1"] = ans
	c.markResent("dup-1")
	batch := strings.Join([]string{
		`{"id":"a","from":"bob","kind":"chat"}`,
		`{"id":"a","from":"bob","kind":"chat"}`, // the one right before: dropped
		`{"id":"eph","from":"bob","kind":"chat","lifecycle":{"mode":"ephemeral"}}`,
		`{"id":"s1","from":"system:gateway","kind":"system/contexts","correlation_id":"q1","payload":{"contexts":[]}}`,
		`{"id":"s2","from":"system:gateway","kind":"system/error","correlation_id":"dup-1","payload":{"error":"duplicate_id","message":"m","retryable":false}}`,
		`{"id":"s3","from":"system:gateway","kind":"system/error","correlation_id":"x","payload":{"error":"rate_limited","message":"m","retryable":true,"retry_after_ms":5}}`,
		`{"id":"s4","from":"system:gateway","kind":"system/presence","payload":{"event":"leave","participant":{"id":"carol","capabilities":[]}}}`,
		`not json`,
		`{"id":"b","from":"bob","kind":"chat"}`,
	}, "\n") + "\n"
	for _, line := range splitLines([]byte(batch)) {
		if !c.dispatch(line) {
			t.Fatal("dispatch stopped")
		}
	}
	if a := <-ans; a.ID != "s1" {
		t.Fatalf("answer %+v", a)
	}
	var kinds []string
	for len(c.events) > 0 {
		switch ev := (<-c.events).(type) {
		case *Message:
			kinds = append(kinds, "msg "+ev.ID)
		case *GatewayError:
			kinds = append(kinds, "err "+string(ev.Code))
		case *Presence:
			kinds = append(kinds, "presence "+ev.Participant.ID)
		}
	}
	want := []string{"msg a", "msg eph", "err rate_limited", "presence carol", "msg b"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("events %v, want %v", kinds, want)
	}
	if c.resumeID != "b" {
		t.Fatalf("resume after %q", c.resumeID)
	}
	c.dispatch([]byte(`{"id":"eph2","from":"bob","kind":"chat","lifecycle":{"mode":"ephemeral"}}`))
	if c.resumeID != "b" || c.lastID != "eph2" {
		t.Fatalf("an ephemeral envelope moved the resume point: %q", c.resumeID)
	}
	if got := splitLines([]byte("{}\n\n  \n{}")); len(got) != 2 {
		t.Fatalf("%q", got)
	}
}

func TestBackoff(t *testing.T) {
	r := Reconnect{MinDelay: 100 * time.Millisecond, MaxDelay: time.Second}
	for n, want := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		want *= time.Millisecond
		for range 50 {
			if d := backoff(r, n); d < want/2 || d > want {
				t.Fatalf("attempt %d: %v, want %v to %v", n, d, want/2, want)
			}
		}
	}
	if d := backoff(r, 500); d > time.Second {
		t.Fatal(d)
	}
}

// A client that reads too slowly is cut with 4008; it reconnects, says
// why, and resumes, so its user still gets every envelope once, in order.
func TestSlowConsumerResume(t *testing.T) {
	url := startGateway(t, func(c *gateway.Config) { c.Rate, c.Burst, c.SendQueue = 1e5, 100000, 16 })
	alice := dial(t, url, Options{Pod: "sc", Participant: "alice"})
	bob := dial(t, url, Options{Pod: "sc", Participant: "bob", EventBuffer: 1, Reconnect: Reconnect{MinDelay: 10 * time.Millisecond}})
	expect[*Welcome](t, bob)
	// 600 envelopes of 16 KiB: more than the socket buffers between the
	// two hold, so the gateway's queue of 16 fills while bob does not read.
	const n = 600
	pad := strings.Repeat("x", 16<<10)
	sentAll := make(chan struct{})
	go func() {
		defer close(sentAll)
		for i := range n {
			p := fmt.Sprintf(`{"i":%d,"pad":%q}`, i, pad)
			if _, err := alice.Send(context.Background(), &wire.Envelope{Kind: "seq", Payload: json.RawMessage(p)}); err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
		}
	}()
	// Read once alice is done (the queue overflowed long before), but
	// well within the 5 s the gateway gives the closing handshake, so
	// that the close code is read.
	select {
	case <-sentAll:
	case <-time.After(3 * time.Second):
	}
	var got []int
	var rec *Reconnected
	for len(got) < n {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		ev, err := bob.Next(ctx)
		cancel()
		if err != nil {
			break
		}
		switch ev := ev.(type) {
		case *Message:
			var seq struct{ I int }
			if err := ev.DecodePayload(&seq); err != nil {
				t.Fatal(err)
			}
			got = append(got, seq.I)
		case *Reconnected:
			rec = ev
		}
	}
	if rec == nil {
		t.Fatalf("bob was not cut (got %d envelopes)", len(got))
	}
	var ce *ClosedError
	if !errors.Is(rec.Cause, ErrSlowConsumer) || !errors.As(rec.Cause, &ce) || ce.Code != wire.CloseSlowConsumer {
		t.Fatalf("cause %v", rec.Cause)
	}
	missing, dups, outOfOrder := check(got, n)
	t.Logf("received %d envelopes of %d: %d missing, %d twice, %d out of order; resumed %v", len(got), n, missing, dups, outOfOrder, rec.Resumed)
	if !rec.Resumed {
		t.Errorf("the gateway did not resume (welcome history %+v): resume= of docs/protocol.md section 8", rec.Welcome.History)
	}
	if missing+dups+outOfOrder > 0 {
		t.Errorf("the user did not get every envelope once, in order")
	}
}
