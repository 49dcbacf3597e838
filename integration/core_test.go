package integration

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// TestCoreWelcome: the welcome is the first message, addressed to the
// joiner, and describes the joiner, the others (not the joiner), the pod,
// the effective filter and the limits; presence join and leave reach the
// others but never the participant they are about.
func TestCoreWelcome(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.MaxMessageBytes = 5000
		c.MaxDepth = 7
		c.Rate = 42
		c.Burst = 84
		c.ContextTimeout = 90 * time.Second
	})
	const pod = "core-welcome"

	alice := g.Dial(t, pod, "alice", "")
	w := alice.Welcome
	if w.Str("protocol") != "mcpp/v0.1" || w.Str("from") != "system:gateway" {
		t.Fatalf("welcome protocol/from: %v", w)
	}
	if !uuidV4.MatchString(w.Str("id")) || w.Str("ts") == "" {
		t.Fatalf("welcome has no id or ts: %v", w)
	}
	if !harness.JSONEqual(w["to"], []string{"alice"}) {
		t.Fatalf("welcome to = %v, want [alice]", w["to"])
	}
	pl := w.Payload()
	if !harness.JSONEqual(pl["you"], map[string]any{"id": "alice", "capabilities": []string{"*"}}) {
		t.Fatalf("welcome you = %v", pl["you"])
	}
	if !harness.JSONEqual(pl["participants"], []any{}) {
		t.Fatalf("first joiner's welcome lists participants %v, want []", pl["participants"])
	}
	if pl["pod"] != pod {
		t.Fatalf("welcome pod = %v", pl["pod"])
	}
	f, _ := pl["filter"].(map[string]any)
	if f["main"] != true || f["contexts"] != "all" || f["routing"] != "all" || f["echo"] != false || f["batch"] != false {
		t.Fatalf("default filter in welcome = %v", f)
	}
	lim, _ := pl["limits"].(map[string]any)
	for k, want := range map[string]float64{
		"max_message_bytes": 5000, "max_context_bytes": 4096, "max_depth": 7,
		"rate": 42, "burst": 84, "context_rate": 50, "context_timeout_ms": 90000,
	} {
		if got, ok := lim[k].(float64); !ok || got != want {
			t.Errorf("welcome limits[%s] = %v, want %v", k, lim[k], want)
		}
	}

	// bob's welcome lists alice (not bob), and shows his effective filter.
	bob := g.Dial(t, pod, "bob", "routing=directed&echo=1&contexts=none&types=reasoning")
	if got := harness.IDsOf(bob.Welcome.Payload()["participants"]); !harness.JSONEqual(got, []string{"alice"}) {
		t.Fatalf("bob's welcome participants = %v, want [alice]", got)
	}
	if !harness.JSONEqual(bob.Welcome["to"], []string{"bob"}) {
		t.Fatalf("bob's welcome to = %v", bob.Welcome["to"])
	}
	bf, _ := bob.Welcome.Payload()["filter"].(map[string]any)
	if bf["routing"] != "directed" || bf["echo"] != true || bf["contexts"] != "none" || !harness.JSONEqual(bf["types"], []string{"reasoning"}) {
		t.Fatalf("bob's welcome filter = %v", bf)
	}
	// alice hears of bob, with his capabilities; it is her first message
	// after the welcome (she is never told of her own join).
	j := alice.Expect()
	harness.PresenceOf(t, j, "join", "bob")
	if !harness.JSONEqual(j.Payload()["participant"], map[string]any{"id": "bob", "capabilities": []string{"*"}}) {
		t.Fatalf("join payload = %v", j.Payload())
	}

	carol := g.Dial(t, pod, "carol", "")
	got := harness.IDsOf(carol.Welcome.Payload()["participants"])
	if len(got) != 2 || !(got[0] == "alice" && got[1] == "bob" || got[0] == "bob" && got[1] == "alice") {
		t.Fatalf("carol's welcome participants = %v, want alice and bob", got)
	}
	harness.PresenceOf(t, alice.Expect(), "join", "carol")
	// bob's first message after his welcome is carol's join: he was not
	// told of his own.
	harness.PresenceOf(t, bob.Expect(), "join", "carol")

	// bob leaves: alice and carol are told, and nothing else arrives.
	_ = bob.Conn.Close()
	harness.PresenceOf(t, alice.Expect(), "leave", "bob")
	harness.PresenceOf(t, carol.Expect(), "leave", "bob")

	// A new joiner no longer sees bob.
	dave := g.Dial(t, pod, "dave", "")
	got = harness.IDsOf(dave.Welcome.Payload()["participants"])
	if len(got) != 2 || strings.Contains(strings.Join(got, ","), "bob") {
		t.Fatalf("dave's welcome participants = %v, want alice and carol", got)
	}
	harness.PresenceOf(t, alice.Expect(), "join", "dave")
	harness.PresenceOf(t, carol.Expect(), "join", "dave")
	alice.ExpectNothing(50 * time.Millisecond)
}

// TestCoreBroadcastExactlyOnce: every envelope reaches each other
// participant exactly once, in the order sent; the sender does not get its
// own unless it joined with echo=1.
func TestCoreBroadcastExactlyOnce(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	const pod = "core-broadcast"
	sender := g.Dial(t, pod, "sender", "")
	echoer := g.Dial(t, pod, "echoer", "echo=1")
	marker := g.Dial(t, pod, "marker", "")
	var receivers []*harness.Client
	for i := 0; i < 4; i++ {
		receivers = append(receivers, g.Dial(t, pod, fmt.Sprintf("r%d", i), ""))
	}
	others := append([]*harness.Client{echoer, marker}, receivers...)

	const n = 25
	for i := 0; i < n; i++ {
		sender.Send(map[string]any{"id": fmt.Sprintf("b-%d", i), "kind": "chat", "payload": map[string]any{"seq": i}})
	}
	for _, r := range others {
		for i := 0; i < n; i++ {
			if m := r.ExpectEnvelope("chat", fmt.Sprintf("b-%d", i)); harness.SeqOf(m) != i || m.Str("from") != "sender" {
				t.Fatalf("%s got %v", r.ID, m)
			}
		}
	}
	// echo-1 is accepted after every b-*: were the sender getting its own,
	// they would come before it. The echoer gets its own once.
	echoer.Send(map[string]any{"id": "echo-1", "kind": "chat"})
	for _, r := range append([]*harness.Client{sender}, others...) {
		r.ExpectEnvelope("chat", "echo-1")
	}
	// "end" is accepted after all of that: a duplicate of anything above
	// would come before it.
	marker.Send(map[string]any{"id": "end", "kind": "chat"})
	for _, r := range append([]*harness.Client{sender}, others...) {
		if r != marker {
			r.ExpectEnvelope("chat", "end")
		}
	}
	// The marker (echo=0) does not get its own "end".
	if m := marker.NextNonPresence(50 * time.Millisecond); m != nil {
		t.Fatalf("marker got %v", m)
	}
}

// TestCoreSenderNoEcho: the sender's stream holds the others' envelopes
// and never its own (echo=0), while an echo=1 sender sees its own once.
func TestCoreSenderNoEcho(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	const pod = "core-echo"
	a := g.Dial(t, pod, "a", "")
	b := g.Dial(t, pod, "b", "echo=1")
	a.Send(map[string]any{"id": "a1", "kind": "chat"})
	b.ExpectEnvelope("chat", "a1")
	// b sees its own b1; a sees b1 and nothing of its own.
	b.Send(map[string]any{"id": "b1", "kind": "chat"})
	b.ExpectEnvelope("chat", "b1")
	a.ExpectEnvelope("chat", "b1")
	b.Send(map[string]any{"id": "b2", "kind": "chat"})
	a.ExpectEnvelope("chat", "b2")
	b.ExpectEnvelope("chat", "b2")
	a.ExpectNothing(30 * time.Millisecond)
	b.ExpectNothing(30 * time.Millisecond)
}

// TestCoreDirectedRouting: routing=directed drops envelopes addressed only
// to others but keeps broadcasts and those whose to names it; with the
// default routing=all an envelope addressed to someone else is still seen.
func TestCoreDirectedRouting(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	const pod = "core-routing"
	alice := g.Dial(t, pod, "alice", "")
	bob := g.Dial(t, pod, "bob", "routing=directed")
	carol := g.Dial(t, pod, "carol", "")
	sends := []struct {
		id string
		to []string
	}{
		{"d1", []string{"carol"}},
		{"d2", []string{"bob"}},
		{"d3", nil},
		{"d4", []string{"carol", "bob"}},
		{"d5", []string{"dave"}}, // no such participant: only routing=all sees it
		{"d6", []string{}},       // empty means broadcast
	}
	for _, s := range sends {
		e := map[string]any{"id": s.id, "kind": "chat"}
		if s.to != nil {
			e["to"] = s.to
		}
		alice.Send(e)
	}
	for _, id := range []string{"d2", "d3", "d4", "d6"} {
		m := bob.ExpectEnvelope("chat", id)
		if id == "d2" && !harness.JSONEqual(m["to"], []string{"bob"}) {
			t.Fatalf("to not relayed as sent: %v", m["to"])
		}
	}
	for _, id := range []string{"d1", "d2", "d3", "d4", "d5", "d6"} {
		carol.ExpectEnvelope("chat", id)
	}
	// Close the stream with a marker: bob got nothing else in between.
	carol.Send(map[string]any{"id": "end", "kind": "chat"})
	bob.ExpectEnvelope("chat", "end")
	alice.ExpectEnvelope("chat", "end")
	bob.ExpectNothing(30 * time.Millisecond)
}

// TestCoreFilledFields: protocol, id, ts and from are filled when absent;
// every field that was sent is relayed byte for byte.
func TestCoreFilledFields(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	const pod = "core-fill"
	alice := g.Dial(t, pod, "alice", "")
	bob := g.Dial(t, pod, "bob", "")
	alice.Expect() // bob's join

	// Nothing but a kind and a payload: the gateway fills the rest.
	before := time.Now().UTC().Add(-time.Second)
	alice.SendRaw([]byte(`{"kind":"chat","payload":{"marker":"fill-1"}}`))
	m, raw := bob.Relayed("")
	after := time.Now().UTC().Add(time.Second)
	if m.Str("protocol") != "mcpp/v0.1" || m.Str("from") != "alice" || m.Kind() != "chat" {
		t.Fatalf("filled envelope: %v", m)
	}
	if !uuidV4.MatchString(m.Str("id")) {
		t.Fatalf("filled id %q is not a UUIDv4", m.Str("id"))
	}
	ts, err := time.Parse(time.RFC3339Nano, m.Str("ts"))
	if err != nil || !strings.HasSuffix(m.Str("ts"), "Z") || ts.Before(before) || ts.After(after) {
		t.Fatalf("filled ts %q: not an RFC 3339 UTC time of now (%v)", m.Str("ts"), err)
	}
	if _, ok := m["context"]; ok {
		t.Fatalf("the gateway added a context: %v", m)
	}
	if _, ok := m["to"]; ok {
		t.Fatalf("the gateway added a to: %v", m)
	}
	if !bytes.Contains(raw, []byte(`"payload":{"marker":"fill-1"}`)) {
		t.Fatalf("payload bytes changed: %s", raw)
	}
	// Two envelopes without an id get different ids.
	alice.SendRaw([]byte(`{"kind":"chat"}`))
	if m2 := bob.NextOf(); m2.Str("id") == m.Str("id") || !uuidV4.MatchString(m2.Str("id")) {
		t.Fatalf("second filled id %q (first %q)", m2.Str("id"), m.Str("id"))
	}

	// Everything present, odd spacing, unknown fields, number forms and
	// escapes that a re-encoding would change: relayed byte for byte.
	full := []byte(`{ "protocol" : "mcpp/v0.1","id":"my-id-ü1", "ts":"not really a time","from":"alice",` +
		`"kind":"chat", "x-extra":{"a":[1, 2 ,3], "b":1.50e1},"correlation_id":["c1","c2"],` +
		`"to":[],"payload":{"n": 1.500, "s":"\u00e9\/", "big": 12345678901234567890123}, "zz":null }`)
	alice.SendRaw(full)
	_, got := bob.Relayed("my-id-ü1")
	if !bytes.Equal(got, full) {
		t.Fatalf("complete envelope not relayed byte for byte:\n sent %s\n  got %s", full, got)
	}

	// Some fields present: what was sent is kept exactly, after the
	// fields the gateway fills.
	part := []byte(`{"id":"keep-1","ts":"2020-01-01T00:00:00+02:00","kind":"chat","x-y":[true,false,null],"payload":[1,"two",{"3":4.0}]}`)
	alice.SendRaw(part)
	pm, got := bob.Relayed("keep-1")
	for _, frag := range []string{`"id":"keep-1"`, `"ts":"2020-01-01T00:00:00+02:00"`, `"x-y":[true,false,null]`, `"payload":[1,"two",{"3":4.0}]`} {
		if !bytes.Contains(got, []byte(frag)) {
			t.Fatalf("relayed %s lost %s", got, frag)
		}
	}
	if pm.Str("from") != "alice" || pm.Str("protocol") != "mcpp/v0.1" || pm.Str("ts") != "2020-01-01T00:00:00+02:00" {
		t.Fatalf("partly filled envelope: %v", pm)
	}
	if bytes.Count(got, []byte(`"id"`)) != 1 || bytes.Count(got, []byte(`"ts"`)) != 1 {
		t.Fatalf("a sent field was filled again: %s", got)
	}

	// Leading white space and newlines between tokens: still one line
	// (a batch is split on newlines), same content.
	alice.SendRaw([]byte(" \r\n {\n\t\"id\": \"nl-1\",\r\n \"kind\": \"chat\",\n \"payload\": {\"s\": \"a\\nb\"}\n}\n"))
	nm, got := bob.Relayed("nl-1")
	if bytes.ContainsAny(got, "\r\n") || nm.Str("from") != "alice" || nm.Payload()["s"] != "a\nb" {
		t.Fatalf("multi-line envelope relayed as %q", got)
	}

	// from equal to the sender's id is accepted as is.
	alice.SendRaw([]byte(`{"id":"from-ok","from":"alice","kind":"chat"}`))
	bob.ExpectEnvelope("chat", "from-ok")
	// payload null is allowed.
	alice.SendRaw([]byte(`{"id":"null-payload","kind":"chat","payload":null}`))
	if m := bob.ExpectEnvelope("chat", "null-payload"); m["payload"] != nil {
		t.Fatalf("payload null relayed as %v", m["payload"])
	}
	alice.ExpectNothing(30 * time.Millisecond)
}

// TestCoreRefusals: each refused envelope gets the right system/error,
// to the sender alone, with correlation_id = its id when it had one; it
// is not relayed and the connection stays open.
func TestCoreRefusals(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	const pod = "core-refusals"
	alice := g.DialWebSocket(t, pod, "alice", "") // sends a binary message too
	bob := g.Dial(t, pod, "bob", "")
	alice.Expect() // bob's join

	const noID = "" // the envelope has no (valid) id
	cases := []struct {
		name string
		msg  string
		code string
		cid  string
	}{
		{"not JSON", `hello`, "invalid_json", noID},
		{"truncated", `{"id":"t1","kind":"chat"`, "invalid_json", noID},
		{"array", `[{"kind":"chat"}]`, "invalid_json", noID},
		{"string", `"chat"`, "invalid_json", noID},
		{"empty", ``, "invalid_json", noID},
		{"bad UTF-8", "{\"id\":\"u1\",\"kind\":\"chat\",\"payload\":\"\xff\xfe\"}", "invalid_json", noID},
		{"missing kind", `{"id":"e1","payload":{}}`, "invalid_envelope", "e1"},
		{"empty kind", `{"id":"e2","kind":""}`, "invalid_envelope", "e2"},
		{"null kind", `{"id":"e3","kind":null}`, "invalid_envelope", "e3"},
		{"number kind", `{"id":"e4","kind":42}`, "invalid_envelope", "e4"},
		{"null to", `{"id":"e5","kind":"chat","to":null}`, "invalid_envelope", "e5"},
		{"string to", `{"id":"e6","kind":"chat","to":"bob"}`, "invalid_envelope", "e6"},
		{"number in to", `{"id":"e7","kind":"chat","to":["bob",1]}`, "invalid_envelope", "e7"},
		{"null ts", `{"id":"e8","kind":"chat","ts":null}`, "invalid_envelope", "e8"},
		{"number ts", `{"id":"e9","kind":"chat","ts":1700000000}`, "invalid_envelope", "e9"},
		{"null from", `{"id":"e10","kind":"chat","from":null}`, "invalid_envelope", "e10"},
		{"null protocol", `{"id":"e11","kind":"chat","protocol":null}`, "invalid_envelope", "e11"},
		{"number protocol", `{"id":"e12","kind":"chat","protocol":1}`, "invalid_envelope", "e12"},
		{"null correlation_id", `{"id":"e13","kind":"chat","correlation_id":null}`, "invalid_envelope", "e13"},
		{"number correlation_id", `{"id":"e14","kind":"chat","correlation_id":7}`, "invalid_envelope", "e14"},
		{"mixed correlation_id", `{"id":"e15","kind":"chat","correlation_id":["a",1]}`, "invalid_envelope", "e15"},
		{"null context", `{"id":"e16","kind":"chat","context":null}`, "invalid_envelope", "e16"},
		{"null id", `{"id":null,"kind":"chat"}`, "invalid_envelope", noID},
		{"kind twice", `{"id":"k2","kind":"chat","kind":"system/x"}`, "invalid_envelope", "k2"},
		{"from twice", `{"id":"k3","kind":"chat","from":"alice","from":"bob"}`, "invalid_envelope", "k3"},
		{"id too long", `{"id":"` + strings.Repeat("i", 129) + `","kind":"chat"}`, "invalid_envelope", noID},
		{"number id", `{"id":7,"kind":"chat"}`, "invalid_envelope", noID},
		{"empty id", `{"id":"","kind":"chat"}`, "invalid_envelope", noID},
		{"unknown protocol", `{"id":"p1","kind":"chat","protocol":"mcpp/v9"}`, "unsupported_protocol", "p1"},
		{"from another", `{"id":"f1","kind":"chat","from":"bob"}`, "auth_violation", "f1"},
		{"from gateway", `{"id":"f2","kind":"chat","from":"system:gateway"}`, "auth_violation", "f2"},
		{"system kind", `{"id":"s1","kind":"system/welcome"}`, "reserved_kind", "s1"},
		{"system presence", `{"id":"s2","kind":"system/presence","payload":{"event":"join"}}`, "reserved_kind", "s2"},
		// Several rules broken: the first of the table is reported.
		{"null kind, bad protocol", `{"id":"o1","kind":null,"protocol":"x"}`, "invalid_envelope", "o1"},
		{"bad protocol, foreign from", `{"id":"o2","kind":"chat","protocol":"x","from":"bob"}`, "unsupported_protocol", "o2"},
		{"foreign from, system kind", `{"id":"o3","kind":"system/x","from":"bob"}`, "auth_violation", "o3"},
	}
	for _, tc := range cases {
		alice.SendRaw([]byte(tc.msg))
		m := alice.ExpectKind("system/error")
		if m.ErrCode() != tc.code {
			t.Errorf("%s: got %q (%v), want %q", tc.name, m.ErrCode(), m.Payload()["message"], tc.code)
			continue
		}
		if got, _ := m["correlation_id"].(string); got != tc.cid {
			t.Errorf("%s: correlation_id %q, want %q", tc.name, got, tc.cid)
		}
		if m.Str("from") != "system:gateway" || !harness.JSONEqual(m["to"], []string{"alice"}) || m.Str("protocol") != "mcpp/v0.1" {
			t.Errorf("%s: error envelope header: %v", tc.name, m)
		}
		pl := m.Payload()
		if msg, _ := pl["message"].(string); msg == "" || pl["retryable"] != false {
			t.Errorf("%s: error payload %v", tc.name, pl)
		}
	}
	// A binary message is invalid_json.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := alice.Conn.(harness.WebSocketConn).WriteBinary(ctx, []byte(`{"id":"bin","kind":"chat"}`)); err != nil {
		t.Fatal(err)
	}
	alice.ExpectError("invalid_json")

	// Nothing was relayed, and the connection still works both ways.
	if !alice.IsOpen() {
		t.Fatal("connection closed after refusals")
	}
	harness.ExpectBothWays(alice, bob, "good", "back")
}

// TestCoreMCPX: an MCPx client (topic=) gets its welcome, gateway messages
// and relayed envelopes with protocol mcpx/v0.1 while an MCPP client of
// the same pod gets mcpp/v0.1; nothing else in the envelope changes.
func TestCoreMCPX(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	const pod = "core-mcpx"
	alice := g.Dial(t, pod, "alice", "") // MCPP
	// bob joins with topic= instead of pod= (dial always sets pod).
	q := map[string][]string{"topic": {pod}, "participant": {"bob"}}
	conn, _, err := harness.DialWebSocket(g.WS, q, nil) // the public client always sends pod=
	if err != nil {
		t.Fatal(err)
	}
	bob := harness.StartClient(t, harness.WebSocketConn{WS: conn}, true)
	carol := g.Dial(t, pod, "carol", "protocol=mcpx/v0.1")

	if alice.Welcome.Str("protocol") != "mcpp/v0.1" {
		t.Fatalf("MCPP welcome protocol %q", alice.Welcome.Str("protocol"))
	}
	if bob.Welcome.Str("protocol") != "mcpx/v0.1" || bob.Welcome.Payload()["pod"] != pod {
		t.Fatalf("MCPx (topic=) welcome: %v", bob.Welcome)
	}
	if carol.Welcome.Str("protocol") != "mcpx/v0.1" {
		t.Fatalf("protocol=mcpx/v0.1 welcome protocol %q", carol.Welcome.Str("protocol"))
	}
	// Presence: each in its own protocol.
	m := alice.Expect()
	harness.PresenceOf(t, m, "join", "bob")
	if m.Str("protocol") != "mcpp/v0.1" {
		t.Fatalf("MCPP presence protocol %q", m.Str("protocol"))
	}
	m = bob.Expect()
	harness.PresenceOf(t, m, "join", "carol")
	if m.Str("protocol") != "mcpx/v0.1" {
		t.Fatalf("MCPx presence protocol %q", m.Str("protocol"))
	}
	alice.Expect() // carol's join

	// An envelope without protocol and one with mcpp/v0.1.
	alice.SendRaw([]byte(`{"id":"x1","kind":"chat","payload":{"k":[1, 2]}}`))
	sent := []byte(`{"protocol":"mcpp/v0.1","id":"x2","ts":"t","from":"alice","kind":"chat","extra":1,"payload":{"k":"v"}}`)
	alice.SendRaw(sent)
	want := bytes.Replace(sent, []byte(`"mcpp/v0.1"`), []byte(`"mcpx/v0.1"`), 1)
	for _, c := range []*harness.Client{bob, carol} {
		for _, id := range []string{"x1", "x2"} {
			m, raw := c.Relayed(id)
			if m.Str("protocol") != "mcpx/v0.1" || m.Str("from") != "alice" {
				t.Fatalf("%s got %v, want protocol mcpx/v0.1", c.ID, m)
			}
			if id == "x2" && !bytes.Equal(raw, want) {
				t.Fatalf("MCPx relay changed more than the protocol:\n want %s\n  got %s", want, raw)
			}
		}
	}
	// An MCPx client's envelope reaches an MCPP client as sent.
	bob.SendRaw([]byte(`{"protocol":"mcpx/v0.1","id":"x3","kind":"chat"}`))
	if m := alice.ExpectEnvelope("chat", "x3"); m.Str("protocol") != "mcpx/v0.1" || m.Str("from") != "bob" {
		t.Fatalf("alice got %v", m)
	}
	carol.ExpectEnvelope("chat", "x3")
	// And without protocol, an MCPP client sees the filled mcpp/v0.1.
	bob.SendRaw([]byte(`{"id":"x4","kind":"chat"}`))
	if m := alice.ExpectEnvelope("chat", "x4"); m.Str("protocol") != "mcpp/v0.1" {
		t.Fatalf("alice got %v", m)
	}
	if m := carol.ExpectEnvelope("chat", "x4"); m.Str("protocol") != "mcpx/v0.1" {
		t.Fatalf("carol got %v", m)
	}
	// Errors come in the participant's protocol.
	bob.SendRaw([]byte(`{"id":"x5","kind":"system/x"}`))
	if e := bob.ExpectError("reserved_kind"); e.Str("protocol") != "mcpx/v0.1" {
		t.Fatalf("MCPx error protocol %q", e.Str("protocol"))
	}
	alice.SendRaw([]byte(`{"id":"x6","kind":"system/x"}`))
	if e := alice.ExpectError("reserved_kind"); e.Str("protocol") != "mcpp/v0.1" {
		t.Fatalf("MCPP error protocol %q", e.Str("protocol"))
	}
}

// TestCoreHealthAndMetrics: /healthz and /livez answer 200; /metrics
// counts connections, accepted envelopes and errors by code.
func TestCoreHealthAndMetrics(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	const pod = "core-metrics"
	for _, path := range []string{"/healthz", "/livez"} {
		status, body, err := harness.HTTPGet(g.URL + path)
		if err != nil || status != http.StatusOK || body != "ok\n" {
			t.Fatalf("%s: %d %q %v, want 200 ok", path, status, body, err)
		}
	}
	if v := harness.Metric(t, g.URL, "mcpp_connections"); v != 0 {
		t.Fatalf("mcpp_connections = %v before any connection", v)
	}
	a := g.Dial(t, pod, "a", "")
	b := g.Dial(t, pod, "b", "")
	a.Expect() // b's join
	harness.Eventually(t, 5*time.Second, "mcpp_connections = 2", func() bool {
		return harness.Metric(t, g.URL, "mcpp_connections") == 2
	})
	for i := 0; i < 3; i++ {
		a.Send(map[string]any{"id": fmt.Sprintf("m%d", i), "kind": "chat"})
	}
	a.SendRaw([]byte(`nope`))
	a.ExpectError("invalid_json")
	a.SendRaw([]byte(`{"kind":"system/x"}`))
	a.ExpectError("reserved_kind")
	a.SendRaw([]byte(`{"kind":"system/y"}`))
	a.ExpectError("reserved_kind")
	for i := 0; i < 3; i++ {
		b.ExpectEnvelope("chat", fmt.Sprintf("m%d", i))
	}
	ms := harness.MetricsOf(t, g.URL)
	for series, want := range map[string]float64{
		"mcpp_envelopes_in_total":                 3,
		`mcpp_errors_total{code="invalid_json"}`:  1,
		`mcpp_errors_total{code="reserved_kind"}`: 2,
	} {
		if ms[series] != want {
			t.Errorf("%s = %v, want %v", series, ms[series], want)
		}
	}
	_ = b.Conn.Close()
	harness.Eventually(t, 5*time.Second, "mcpp_connections = 1", func() bool {
		return harness.Metric(t, g.URL, "mcpp_connections") == 1
	})
}

// TestCoreJoinDuringTraffic: participants that join while a sender is
// busy get their welcome first and then an unbroken run of the sender's
// envelopes up to the last one: nothing accepted after they joined is
// missed.
func TestCoreJoinDuringTraffic(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Rate, c.Burst = 1e6, 1000000 })
	const pod = "core-join-traffic"
	sender := g.Dial(t, pod, "sender", "")
	observer := g.Dial(t, pod, "observer", "")

	stop := make(chan struct{})
	last := make(chan int, 1)
	failed := make(chan error, 1)
	go func() {
		// Windows of 20 that the observer has received, so that nobody's
		// queue grows without bound; 200 more after stop.
		seq, extra := 0, -1
		for extra != 0 {
			for i := 0; i < 20; i++ {
				b := fmt.Appendf(nil, `{"id":"j-%d","kind":"chat","payload":{"seq":%d}}`, seq, seq)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := sender.Conn.Write(ctx, b)
				cancel()
				if err != nil {
					failed <- err
					return
				}
				seq++
			}
			for got := 0; got < 20; {
				m := observer.Next(5 * time.Second)
				if m == nil {
					failed <- fmt.Errorf("observer: nothing within 5s")
					return
				}
				if m.Kind() == "chat" {
					got++
				}
			}
			select {
			case <-stop:
				if extra < 0 {
					extra = 10
				}
			default:
			}
			if extra > 0 {
				extra--
			}
		}
		last <- seq - 1
	}()

	var joiners []*harness.Client
	for i := 0; i < 6; i++ {
		joiners = append(joiners, g.Dial(t, pod, fmt.Sprintf("j%d", i), ""))
	}
	close(stop)
	var end int
	select {
	case end = <-last:
	case err := <-failed:
		t.Fatal(err)
	}
	for _, j := range joiners {
		first := -1
		for prev := -1; prev != end; {
			m := j.NextOf()
			s := harness.SeqOf(m)
			if prev >= 0 && s != prev+1 {
				t.Fatalf("%s: got seq %d after %d (first %d)", j.ID, s, prev, first)
			}
			if first < 0 {
				first = s
			}
			prev = s
		}
		t.Logf("%s: seq %d..%d", j.ID, first, end)
	}
}
