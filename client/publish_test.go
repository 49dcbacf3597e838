package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/wire"
)

// Publish relays envelopes without joining: a participant of the pod
// receives them, and no presence; each result says what became of one
// envelope, in order.
func TestPublish(t *testing.T) {
	ws := startGateway(t, nil)
	bob := dial(t, ws, Options{Pod: "pub", Participant: "bob"})
	expect[*Welcome](t, bob)

	http := "http" + strings.TrimSuffix(strings.TrimPrefix(ws, "ws"), "/ws")
	one := &wire.Envelope{Kind: "chat", Payload: json.RawMessage(`{"text":"one"}`)}
	res, err := Publish(ctxT(t), http, PublishOptions{Pod: "pub", Participant: "ci"}, one)
	if err != nil || len(res) != 1 || res[0].ID == "" || res[0].ID != one.ID || ResultError(res[0]) != nil {
		t.Fatalf("%+v %v (id %q)", res, err, one.ID)
	}
	m := expect[*Message](t, bob)
	if m.ID != one.ID || m.From != "ci" || string(m.Payload) != `{"text":"one"}` {
		t.Fatalf("%+v", m.Envelope)
	}

	// Several, one refused in the middle; the /ws URL does too.
	res, err = Publish(ctxT(t), ws, PublishOptions{Pod: "pub", Participant: "ci"},
		&wire.Envelope{Kind: "chat", ID: "p-1"},
		&wire.Envelope{Kind: "system/x", ID: "p-2"},
		&wire.Envelope{Kind: "chat", ID: "p-3", Context: wire.Context{ID: "c1", Type: "task"}.JSON()})
	if err != nil || len(res) != 3 || res[0].ID != "p-1" || res[2].ID != "p-3" {
		t.Fatalf("%+v %v", res, err)
	}
	err = ResultError(res[1])
	var ge *GatewayError
	if !errors.As(err, &ge) || ge.RefusedID() != "p-2" || !IsCode(err, wire.CodeReservedKind) || ResultError(res[0]) != nil {
		t.Fatalf("%v", err)
	}
	for _, want := range []string{"p-1", "p-3"} {
		if m := expect[*Message](t, bob); m.ID != want {
			t.Fatalf("got %s, want %s", m.ID, want)
		}
	}

	// The same id again is a duplicate: the first got through.
	res, err = Publish(ctxT(t), ws, PublishOptions{Pod: "pub", Participant: "ci"}, one)
	if err != nil || !IsCode(ResultError(res[0]), wire.CodeDuplicateID) {
		t.Fatalf("%+v %v", res, err)
	}

	// JSON as it is: a line that is not an object is the gateway's to refuse.
	res, err = PublishRaw(ctxT(t), ws, PublishOptions{Pod: "pub", Participant: "ci"},
		json.RawMessage("{\"kind\":\n\"chat\",\"id\":\"raw-1\"}"), json.RawMessage(`[1]`))
	if err != nil || len(res) != 2 || res[0].ID != "raw-1" || !IsCode(ResultError(res[1]), wire.CodeInvalidJSON) {
		t.Fatalf("%+v %v", res, err)
	}
	if m := expect[*Message](t, bob); m.ID != "raw-1" {
		t.Fatalf("%+v", m.Envelope)
	}

	// Nobody saw ci join or leave.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	for {
		ev, err := bob.Next(ctx)
		if err != nil {
			break
		}
		t.Fatalf("unexpected event %T %+v", ev, ev)
	}
}

// Ask asks the gateway without joining and returns the answer's payload;
// a refused request is a *GatewayError.
func TestAsk(t *testing.T) {
	ws := startGateway(t, nil)
	opts := PublishOptions{Pod: "ask", Participant: "ci"}
	if _, err := Publish(ctxT(t), ws, opts,
		&wire.Envelope{Kind: "chat", ID: "a-1", Context: wire.Context{ID: "r1", Type: "reasoning"}.JSON()},
		&wire.Envelope{Kind: "chat", ID: "a-2"}); err != nil {
		t.Fatal(err)
	}
	raw, err := Ask(ctxT(t), ws, opts, wire.RequestContexts, wire.ContextsRequest{State: wire.StateAll})
	var ca wire.ContextsAnswer
	if err != nil || json.Unmarshal(raw, &ca) != nil || len(ca.Contexts) != 1 || ca.Contexts[0].ID != "r1" {
		t.Fatalf("%s %v", raw, err)
	}
	// The history answers as the gateway has delivered so far, which may
	// not hold what was published a moment ago yet (docs/protocol.md
	// section 6, read-your-writes): ask until it does.
	var ha wire.HistoryAnswer
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		raw, err = Ask(ctxT(t), ws, opts, wire.RequestHistory, wire.HistoryRequest{Limit: 1})
		if err != nil || json.Unmarshal(raw, &ha) != nil || len(ha.Envelopes) > 0 || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || len(ha.Envelopes) != 1 || ha.Envelopes[0].ID != "a-2" || !ha.More {
		t.Fatalf("%s %v", raw, err)
	}
	_, err = Ask(ctxT(t), ws, opts, wire.RequestHistory, wire.HistoryRequest{Before: "nope"})
	if !IsCode(err, wire.CodeInvalidEnvelope) {
		t.Fatalf("%v", err)
	}
	if _, err := Ask(ctxT(t), ws, opts, wire.RequestFilter, wire.Filter{}); !IsCode(err, wire.CodeUnknownRequest) {
		t.Fatalf("%v", err)
	}
	if _, err := Ask(ctxT(t), ws, opts, "chat", nil); err == nil {
		t.Fatal("Ask sent a chat")
	}
}

// A publish request refused as a whole is a *RefusedError, as a refused
// upgrade is; a token in the URL is hidden from errors.
func TestPublishRefused(t *testing.T) {
	ws := startGateway(t, nil)
	_, err := Publish(ctxT(t), ws, PublishOptions{Pod: "lab"}, &wire.Envelope{Kind: "chat"})
	var re *RefusedError
	if !errors.As(err, &re) || re.StatusCode != 400 || re.Code != wire.CodeInvalidParticipant || !strings.Contains(err.Error(), "refused the request") {
		t.Fatalf("%v", err)
	}
	_, err = Publish(ctxT(t), ws, PublishOptions{Pod: "a/b", Participant: "ci"}, &wire.Envelope{Kind: "chat"})
	if !IsCode(err, wire.CodeInvalidPod) {
		t.Fatalf("%v", err)
	}

	tokens := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(tokens, []byte(`{"tokens": [{"token": "s3cr3t", "participant": "alice", "capabilities": ["chat"], "pods": ["lab"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ws2 := startGateway(t, func(c *gateway.Config) { c.Tokens = tokens })
	for _, tc := range []struct {
		pod, token string
		status     int
	}{{"lab", "", 401}, {"lab", "wrong", 401}, {"other", "s3cr3t", 403}} {
		_, err := Publish(ctxT(t), ws2, PublishOptions{Pod: tc.pod, Token: tc.token}, &wire.Envelope{Kind: "chat"})
		if !errors.As(err, &re) || re.StatusCode != tc.status || re.Temporary() {
			t.Errorf("%+v: %v", tc, err)
		}
	}
	res, err := Publish(ctxT(t), ws2+"?token=s3cr3t", PublishOptions{Pod: "lab"}, &wire.Envelope{Kind: "chat"}, &wire.Envelope{Kind: "mcp/x"})
	if err != nil || ResultError(res[0]) != nil || !IsCode(ResultError(res[1]), wire.CodeCapabilityViolation) {
		t.Fatalf("%+v %v", res, err)
	}
	_, err = Publish(ctxT(t), "http://127.0.0.1:1/?token=t0ps3cret", PublishOptions{Pod: "lab"}, &wire.Envelope{Kind: "chat"})
	if err == nil || strings.Contains(err.Error(), "t0ps3cret") {
		t.Fatalf("%v", err)
	}
	if _, err := Publish(ctxT(t), "ftp://x", PublishOptions{Pod: "lab"}, &wire.Envelope{Kind: "chat"}); err == nil {
		t.Fatal("ftp")
	}
	if _, err := Publish(ctxT(t), ws, PublishOptions{Pod: "lab"}); err == nil {
		t.Fatal("nothing to publish")
	}
}

func TestPublishURL(t *testing.T) {
	for in, want := range map[string]string{
		"ws://h:1/ws":           "http://h:1/pods/lab/envelopes?participant=p",
		"ws://h:1":              "http://h:1/pods/lab/envelopes?participant=p",
		"wss://h/mcpp/ws/":      "https://h/mcpp/pods/lab/envelopes?participant=p",
		"http://h:1/?token=t":   "http://h:1/pods/lab/envelopes?participant=p&token=t",
		"https://h/news#x":      "https://h/news/pods/lab/envelopes?participant=p",
		"http://h/a%2Fb/ws?x=1": "http://h/a%2Fb/pods/lab/envelopes?participant=p&x=1",
	} {
		u, _, err := publishURL(in, PublishOptions{Pod: "lab", Participant: "p"})
		if err != nil || u.String() != want {
			t.Errorf("%s: %v %v, want %s", in, u, err, want)
		}
	}
	u, _, _ := publishURL("http://h", PublishOptions{Pod: "x/y"})
	if u.String() != "http://h/pods/x%2Fy/envelopes" {
		t.Errorf("%s", u)
	}
}

// Every event carries the gateway's bytes.
func TestEventsRaw(t *testing.T) {
	ws := startGateway(t, nil)
	alice := dial(t, ws, Options{Pod: "raw", Participant: "alice"})
	w := expect[*Welcome](t, alice)
	bob := dial(t, ws, Options{Pod: "raw", Participant: "bob"})
	expect[*Welcome](t, bob)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := alice.Next(ctx)
	p, ok := ev.(*Presence)
	if err != nil || !ok {
		t.Fatalf("%T %v", ev, err)
	}
	if _, err := bob.Conclude(ctxT(t), "c1", "done"); err != nil {
		t.Fatal(err)
	}
	m := expect[*Message](t, alice)
	ce := expect[*ContextEvent](t, alice)
	for raw, kind := range map[string]string{string(w.Raw): wire.KindWelcome, string(p.Raw): wire.KindPresence,
		string(m.Raw): wire.KindConclusion, string(ce.Raw): wire.KindContext} {
		var env wire.Envelope
		if json.Unmarshal([]byte(raw), &env) != nil || env.Kind != kind || bytes.ContainsRune([]byte(raw), '\n') {
			t.Errorf("%s: %q", kind, raw)
		}
	}
}

// Reconnect.Report is told of the lost connection and of each failed
// attempt, before the *Reconnected event.
func TestReconnectReport(t *testing.T) {
	url := startGateway(t, nil)
	p, purl := newProxy(t, url)
	type report struct {
		attempt int
		err     error
	}
	reports := make(chan report, 100)
	bob := dial(t, purl, Options{Pod: "rr", Participant: "bob", Reconnect: Reconnect{
		MinDelay: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond,
		Report: func(attempt int, err error) { reports <- report{attempt, err} },
	}})
	expect[*Welcome](t, bob)
	p.Refuse(true)
	p.Cut()
	first := <-reports
	if first.attempt != 0 || !errors.Is(first.err, ErrDisconnected) {
		t.Fatalf("%+v", first)
	}
	if r := <-reports; r.attempt != 1 || r.err == nil {
		t.Fatalf("%+v", r)
	}
	p.Refuse(false)
	r := expect[*Reconnected](t, bob)
	if n := len(reports); r.Attempts != n+2 {
		// attempt 1 was taken from the channel above; the last attempt succeeded
		t.Fatalf("%d attempts, %d more failures reported", r.Attempts, n)
	}
}
