package pod

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpp/gateway/audit"
	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/wire"
)

// trailBuffer is an audit trail's sink that a test reads.
type trailBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *trailBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// withTrail gives n an audit trail and returns a function that closes it
// and returns its lines.
func withTrail(t *testing.T, n *Node) func() []map[string]any {
	w := &trailBuffer{}
	n.Audit = audit.New(w, nil, audit.Options{Node: n.ID})
	return func() []map[string]any {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := n.Audit.Close(ctx); err != nil {
			t.Fatal(err)
		}
		var out []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(w.b.String()), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			out = append(out, m)
		}
		return out
	}
}

// TestAuditRefusalRules: each rule of trust that refuses an envelope
// names itself in the trail's line, with the envelope's kind, id and
// code; a refusal that is no trust decision (a malformed envelope) is no
// line.
func TestAuditRefusalRules(t *testing.T) {
	n, _ := testNode(t, 100, nil)
	lines := withTrail(t, n)
	p := openPod(t, n, "rules")
	alice := sender(p, "alice", wire.Kinds("*")...)
	bob := sender(p, "bob", wire.Capability{Kind: "chat"},
		wire.Capability{Kind: wire.KindMCPRequest, Payload: json.RawMessage(`{"method": "tools/list"}`)})
	carol := sender(p, "carol", wire.Kinds("chat", wire.KindGrant)...)
	dave := sender(p, "dave", wire.Kinds("chat", "context/*")...)
	agent := sender(p, "agent", wire.Kinds(wire.KindMCPProposal)...)
	poster := sender(p, "poster", wire.Kinds("chat")...)
	if dead, e := p.Acquire(poster); dead || e != nil {
		t.Fatal(dead, e)
	}
	defer p.Release(poster)
	call := map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{"name": "deploy"}}

	steps := []struct {
		s    *Sender
		env  map[string]any
		code wire.Code
	}{
		{bob, map[string]any{"id": "e1", "kind": "tool/run"}, wire.CodeCapabilityViolation},
		{bob, map[string]any{"id": "e2", "kind": wire.KindMCPRequest, "to": []string{"tools"}, "payload": call}, wire.CodeCapabilityViolation},
		{alice, map[string]any{"id": "e3", "kind": wire.KindGrant, "payload": map[string]any{"recipient": "alice", "capabilities": []string{"x"}}}, wire.CodeCapabilityViolation},
		{carol, map[string]any{"id": "e4", "kind": wire.KindGrant, "payload": map[string]any{"recipient": "bob", "capabilities": []string{"tool/*"}}}, wire.CodeCapabilityViolation},
		{dave, map[string]any{"id": "ctx", "kind": "context/open", "context": map[string]any{"id": "task", "type": "task"}}, ""},
		{alice, map[string]any{"id": "g1", "kind": wire.KindGrant, "payload": map[string]any{"recipient": "dave", "capabilities": []string{"tool/*"}, "context": "task"}}, ""},
		{dave, map[string]any{"id": "e5", "kind": "tool/run"}, wire.CodeCapabilityViolation},
		{carol, map[string]any{"id": "e6", "kind": wire.KindRevoke, "payload": map[string]any{"recipient": "dave", "grant_id": "g1"}}, wire.CodeCapabilityViolation},
		{bob, map[string]any{"id": "e7", "kind": "chat", "from": "alice"}, wire.CodeAuthViolation},
		{agent, map[string]any{"id": "prop", "kind": wire.KindMCPProposal, "to": []string{"tools"}, "payload": call}, ""},
		{bob, map[string]any{"id": "e8", "kind": wire.KindMCPReject, "correlation_id": "prop", "payload": map[string]any{}}, wire.CodeCapabilityViolation},
		{bob, map[string]any{"id": "e9", "kind": wire.KindMCPWithdraw, "correlation_id": "prop", "payload": map[string]any{}}, wire.CodeCapabilityViolation},
		{alice, map[string]any{"id": "k1", "kind": wire.RequestKick, "payload": map[string]any{"participant": "poster"}}, ""},
		{poster, map[string]any{"id": "e10", "kind": "chat"}, wire.CodeForbidden},
	}
	for _, st := range steps {
		if got := handle(t, p, st.s, st.env); got != st.code {
			t.Fatalf("%s's %v: %q, want %q", st.s.ID, st.env["id"], got, st.code)
		}
	}
	if got := handleRaw(t, p, bob, `{"id": "e11", "kind": "chat", "kind": "tool/run"}`); got != wire.CodeInvalidEnvelope {
		t.Fatalf("a kind twice: %q", got)
	}
	want := map[string][3]string{ // envelope id: participant, code, rule
		"e1":  {"bob", "capability_violation", audit.RuleNoCapability},
		"e2":  {"bob", "capability_violation", audit.RulePayloadPattern},
		"e3":  {"alice", "capability_violation", audit.RuleSelfGrant},
		"e4":  {"carol", "capability_violation", audit.RuleDelegation},
		"e5":  {"dave", "capability_violation", audit.RuleGrantScope},
		"e6":  {"carol", "capability_violation", audit.RuleNotGrantor},
		"e7":  {"bob", "auth_violation", audit.RuleFrom},
		"e8":  {"bob", "capability_violation", audit.RuleNotApprover},
		"e9":  {"bob", "capability_violation", audit.RuleNotProposer},
		"e10": {"poster", "forbidden", audit.RuleRemoved},
	}
	got := map[string]bool{}
	for _, l := range lines() {
		if l["decision"] != string(audit.CapabilityRefused) {
			continue
		}
		id, _ := l["envelope_id"].(string)
		w, ok := want[id]
		if !ok {
			t.Errorf("a refusal nobody asked for: %v", l)
			continue
		}
		if got[id] {
			t.Errorf("%s twice", id)
		}
		got[id] = true
		if l["participant"] != w[0] || l["code"] != w[1] || l["rule"] != w[2] || l["pod"] != "rules" || l["node"] != n.ID ||
			l["transport"] != audit.TransportPublish || l["kind"] == nil || l["message"] == nil {
			t.Errorf("%s: %v, want participant %s, code %s, rule %s", id, l, w[0], w[1], w[2])
		}
	}
	for id := range want {
		if !got[id] {
			t.Errorf("no line for %s", id)
		}
	}
}

// BenchmarkRefusalAudit: what a refusal by a rule of trust costs with the
// audit trail off, on (written to nowhere) and on with a sink that takes
// nothing (a blocked disk: every record past the queue dropped). ns/op is
// per envelope refused, the whole of Handle.
//
//	go test -run '^$' -bench RefusalAudit -benchmem ./pod/
func BenchmarkRefusalAudit(b *testing.B) {
	for _, way := range []string{"off", "discard", "blocked"} {
		b.Run(way, func(b *testing.B) {
			n, _ := testNode(b, 0, nil)
			switch way {
			case "discard":
				n.Audit = audit.New(io.Discard, nil, audit.Options{Node: n.ID})
			case "blocked":
				block := make(chan struct{})
				defer close(block)
				n.Audit = audit.New(blockedWriter(block), nil, audit.Options{Node: n.ID})
			}
			p := openPod(b, n, "bench")
			var results Results
			s := &Sender{ID: "bob", Caps: capability.MustCompile(wire.Kinds("chat")), Protocol: wire.ProtocolMCPP,
				Buckets: n.Buckets.Acquire("bench/bob"), Reply: &results}
			body := []byte(`{"id":"e1","kind":"tool/run","payload":{"text":"not allowed"}}`)
			b.ReportAllocs()
			for b.Loop() {
				p.Handle(s, nil, body, false)
				results = results[:0]
			}
		})
	}
}

// blockedWriter is a sink whose writes wait until block is closed.
type blockedWriter chan struct{}

func (w blockedWriter) Write(p []byte) (int, error) {
	<-w
	return len(p), nil
}
