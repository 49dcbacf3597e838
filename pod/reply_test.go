package pod

import (
	"encoding/json"
	"testing"

	"github.com/mcpp/gateway/wire"
)

// TestReplyRoutes: the same four messages, from a connection (its
// answers are envelopes in its own queue, ReplyTo) and from a POST (one
// result a message, Results): an accepted envelope is answered only over
// HTTP (its result), a refusal is system/error correlated to it, a
// gateway request is answered correlated to it, and a grant's answer
// says what holds, correlated to the grant (over HTTP, in its result).
func TestReplyRoutes(t *testing.T) {
	n, _ := testNode(t, 100, nil)
	p := openPod(t, n, "replies")
	caps := wire.Kinds("chat", wire.KindGrant)
	messages := func(prefix string) []map[string]any {
		return []map[string]any{
			{"id": prefix + "a1", "kind": "chat"},
			{"id": prefix + "x1", "kind": "tool/run"},
			{"id": prefix + "h1", "kind": wire.RequestHistory, "payload": map[string]any{"limit": 1}},
			{"id": prefix + "g1", "kind": wire.KindGrant, "payload": map[string]any{"recipient": "bob", "capabilities": []string{"chat"}}},
		}
	}

	t.Run("connection", func(t *testing.T) {
		alice := join(t, p, "alice", joinOpts{caps: caps})
		for _, env := range messages("") {
			alice.send(env)
		}
		// The answers come in the order the messages were handled: the
		// first correlated one is x1's, so a1 had none.
		var got []map[string]any
		for len(got) < 3 {
			if v := alice.nextEnv(); v["correlation_id"] != nil {
				got = append(got, v)
			}
		}
		for i, want := range []struct{ kind, corr string }{{wire.KindError, "x1"}, {wire.KindHistory, "h1"}, {wire.KindCapability, "g1"}} {
			if got[i]["kind"] != want.kind || got[i]["correlation_id"] != want.corr {
				t.Fatalf("answer %d: %v, want a %s correlated to %s", i, got[i], want.kind, want.corr)
			}
		}
		if pl, _ := got[0]["payload"].(map[string]any); pl["error"] != string(wire.CodeCapabilityViolation) {
			t.Fatalf("the refusal: %v", got[0])
		}
		if pl, _ := got[2]["payload"].(map[string]any); pl["event"] != wire.CapabilityGranted || pl["grant_id"] != "g1" {
			t.Fatalf("the grant's answer: %v", got[2])
		}
	})

	t.Run("results", func(t *testing.T) {
		poster := sender(p, "poster", caps...)
		for _, env := range messages("p-") {
			b, err := json.Marshal(env)
			if err != nil {
				t.Fatal(err)
			}
			p.Handle(poster, nil, b, false)
		}
		rs := resultsOf(poster)
		if len(rs) != 4 {
			t.Fatalf("%d results for 4 messages: %+v", len(rs), rs)
		}
		if r := rs[0]; r.ID != "p-a1" || r.Error != nil || r.Answer != nil {
			t.Fatalf("the accepted chat's result: %+v", r)
		}
		if r := rs[1]; r.ID != "p-x1" || r.Error == nil || r.Error.Code != wire.CodeCapabilityViolation {
			t.Fatalf("the refusal's result: %+v", r)
		}
		var page wire.HistoryAnswer
		if r := rs[2]; r.ID != "p-h1" || r.Error != nil || json.Unmarshal(r.Answer, &page) != nil || len(page.Envelopes) != 1 {
			t.Fatalf("the history request's result: %+v", r)
		}
		var ev wire.CapabilityEvent
		if r := rs[3]; r.ID != "p-g1" || r.Error != nil || json.Unmarshal(r.Answer, &ev) != nil || ev.Event != wire.CapabilityGranted || ev.GrantID != "p-g1" {
			t.Fatalf("the grant's result: %+v", r)
		}
	})
}
