package pod

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/wire"
)

// Issue 31: the pod's trust rules tried as an attacker would, on one
// node with its history in memory.

// sender is a sender with no connection (a POST) holding caps.
func sender(p *Pod, id string, caps ...wire.Capability) *Sender {
	return &Sender{ID: id, Caps: capability.MustCompile(caps), Protocol: wire.ProtocolMCPP,
		Buckets: p.node.Buckets.Acquire(p.Name + "/" + id), Reply: new(Results)}
}

// resultsOf are the results of a sender with no connection.
func resultsOf(s *Sender) Results { return *s.Reply.(*Results) }

// handle hands p one envelope of s's and returns its result: "" when it
// was relayed, else the refusal's code.
func handle(t *testing.T, p *Pod, s *Sender, env map[string]any) wire.Code {
	t.Helper()
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return handleRaw(t, p, s, string(b))
}

func handleRaw(t *testing.T, p *Pod, s *Sender, raw string) wire.Code {
	t.Helper()
	return handleRawIn(t, p, s, nil, raw)
}

// handleIn is handle in burst b.
func handleIn(t *testing.T, p *Pod, s *Sender, b *Burst, env map[string]any) wire.Code {
	t.Helper()
	raw, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return handleRawIn(t, p, s, b, string(raw))
}

func handleRawIn(t *testing.T, p *Pod, s *Sender, b *Burst, raw string) wire.Code {
	t.Helper()
	n := len(resultsOf(s))
	p.Handle(s, b, []byte(raw), false)
	rs := resultsOf(s)
	if len(rs) != n+1 {
		t.Fatalf("%d results for one envelope", len(rs)-n)
	}
	if e := rs[n].Error; e != nil {
		return e.Code
	}
	return ""
}

// relayedIDs reads m until a chat with id end and returns the ids of what
// it received before it.
func relayedIDs(m *member, end string) []string {
	m.t.Helper()
	var ids []string
	for {
		v := m.nextOf()
		if k, _ := v["kind"].(string); strings.HasPrefix(k, "system/") {
			continue
		}
		id, _ := v["id"].(string)
		if id == end {
			return ids
		}
		ids = append(ids, id)
	}
}

// TestKickStopsWhatIsUnderWay: what a participant sends after its kick
// was applied is refused (forbidden), over HTTP (the rest of a POST's
// body: its sender was acquired before the kick) and over MCP (a request
// of its session under way), and nobody receives it.
func TestKickStopsWhatIsUnderWay(t *testing.T) {
	n, _ := testNode(t, 100, nil)
	p := openPod(t, n, "kick-under-way")
	watcher := join(t, p, "watcher", joinOpts{})
	all := wire.Kinds("*")
	mod := sender(p, "mod", all...)

	post := sender(p, "poster", all...)
	if dead, e := p.Acquire(post); dead || e != nil {
		t.Fatalf("acquire: %v %v", dead, e)
	}
	defer p.Release(post)
	g := NewGuest(wire.Identity{ID: "agent"}, func(string) {})
	if dead, e, _ := p.JoinGuest(g); dead || e != nil {
		t.Fatalf("join guest: %v %v", dead, e)
	}
	agent := sender(p, "agent", all...)
	agent.Guest = g

	if c := handle(t, p, post, chat("post-1", 1)); c != "" {
		t.Fatalf("post-1 refused: %s", c)
	}
	if c := handle(t, p, agent, chat("mcp-1", 1)); c != "" {
		t.Fatalf("mcp-1 refused: %s", c)
	}
	for _, who := range []string{"poster", "agent"} {
		if c := handle(t, p, mod, map[string]any{"kind": wire.RequestKick, "payload": map[string]any{"participant": who}}); c != "" {
			t.Fatalf("kick %s refused: %s", who, c)
		}
	}
	if c := handle(t, p, post, chat("post-2", 2)); c != wire.CodeForbidden {
		t.Fatalf("the rest of the kicked POST: %q, want forbidden", c)
	}
	if c := handle(t, p, agent, chat("mcp-2", 2)); c != wire.CodeForbidden {
		t.Fatalf("the kicked MCP session's request under way: %q, want forbidden", c)
	}
	if c := handle(t, p, post, map[string]any{"kind": wire.RequestKick, "payload": map[string]any{"participant": "mod"}}); c != wire.CodeForbidden {
		t.Fatalf("a kick by the kicked POST: %q, want forbidden", c)
	}
	if c := handle(t, p, mod, chat("end", 0)); c != "" {
		t.Fatal(c)
	}
	if got := strings.Join(relayedIDs(watcher, "end"), " "); got != "post-1 mcp-1" {
		t.Fatalf("the watcher received %q, want post-1 mcp-1 only", got)
	}
}

// TestAmbiguousPayloads: a payload the gateway reads, with two keys equal
// ignoring case at any depth (other spellings included: escapes, the
// Kelvin sign, the long s), is refused with ambiguous_payload, so that a
// pattern cannot match one key while a receiver acts on the other.
func TestAmbiguousPayloads(t *testing.T) {
	n, _ := testNode(t, 100, nil)
	p := openPod(t, n, "ambiguous")
	admin := join(t, p, "admin", joinOpts{})
	mod := sender(p, "mod",
		wire.Capability{Kind: wire.RequestKick, Payload: json.RawMessage(`{"participant": "bot-*"}`)},
		wire.Capability{Kind: wire.KindMCPRequest, Payload: json.RawMessage(`{"method": "tools/call", "params": {"name": "read_*"}}`)},
		wire.Capability{Kind: "task", Payload: json.RawMessage(`{"path": "/tmp/*"}`)},
		wire.Capability{Kind: "chat"})
	for _, tc := range []struct{ name, env string }{
		{"kick, a later Participant", `{"kind":"gateway/kick","payload":{"participant":"bot-1","Participant":"admin","ban_ms":60000}}`},
		{"kick, an escaped spelling", `{"kind":"gateway/kick","payload":{"participant":"bot-1","\u0050articipant":"admin"}}`},
		{"kick, the same key twice", `{"kind":"gateway/kick","payload":{"participant":"bot-1","participant":"admin"}}`},
		{"tool call, NAME deeper down", `{"kind":"mcp/request","to":["files"],"payload":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_x","NAME":"delete_all"}}}`},
		{"a pattern's kind, the long s", `{"kind":"task","payload":{"path":"/tmp/a","pathſ":"x","PATH":"/etc/passwd"}}`},
		{"the Kelvin sign", `{"kind":"task","payload":{"path":"/tmp/a","k":1,"\u212a":2}}`},
	} {
		if c := handleRaw(t, p, mod, tc.env); c != wire.CodeAmbiguousPayload {
			t.Errorf("%s: %q, want ambiguous_payload", tc.name, c)
		}
	}
	// A payload the gateway does not read (chat, allowed by its kind) is
	// relayed as sent, whatever its keys.
	if c := handleRaw(t, p, mod, `{"id":"c1","kind":"chat","payload":{"text":"a","TEXT":"b"}}`); c != "" {
		t.Fatalf("chat refused: %s", c)
	}
	// A key that names a field only ignoring case is not read as it.
	if c := handleRaw(t, p, mod, `{"kind":"gateway/kick","payload":{"Participant":"bot-1"}}`); c == "" {
		t.Fatal("a kick whose only key is Participant was taken")
	}
	if ids := relayedIDs(admin, "c1"); len(ids) != 0 {
		t.Fatalf("admin received %v before c1", ids)
	}
	admin.quiet(100 * time.Millisecond) // still in the pod
}

// TestDelegationNeverAmplifies: a grantor gives only what it holds where
// the grant applies, never itself; a grant scoped to a context gives
// nothing outside it, further grants and kicks included; and revoking a
// grant ends every grant made through it.
func TestDelegationNeverAmplifies(t *testing.T) {
	n, _ := testNode(t, 100, nil)
	p := openPod(t, n, "delegation")
	alice := sender(p, "alice", wire.Kinds("*")...)
	bob := sender(p, "bob", wire.Kinds("chat", "context/*", "conclusion")...)
	carol := sender(p, "carol", wire.Kinds("chat")...)
	dave := join(t, p, "dave", joinOpts{}) // a connection, to be told of ends
	grant := func(s *Sender, id string, payload map[string]any) wire.Code {
		t.Helper()
		return handle(t, p, s, map[string]any{"id": id, "kind": wire.KindGrant, "payload": payload})
	}
	// bob may grant chat and tool/* for the whole pod (alice holds both).
	if c := grant(alice, "g-bob", map[string]any{"recipient": "bob", "capabilities": []string{"capability/grant", "tool/*"}}); c != "" {
		t.Fatal(c)
	}
	for _, tc := range []struct {
		name    string
		payload map[string]any
		want    wire.Code
	}{
		{"itself", map[string]any{"recipient": "bob", "capabilities": []string{"tool/run"}}, wire.CodeCapabilityViolation},
		{"beyond what it holds", map[string]any{"recipient": "carol", "capabilities": []string{"*"}}, wire.CodeCapabilityViolation},
		{"a wider pattern than it holds", map[string]any{"recipient": "carol", "capabilities": []string{"tool*"}}, wire.CodeCapabilityViolation},
		{"what it holds through a grant", map[string]any{"recipient": "carol", "capabilities": []string{"tool/run"}}, ""},
		{"what its token gives", map[string]any{"recipient": "dave", "capabilities": []string{"chat"}}, ""},
	} {
		if c := grant(bob, "g-"+strings.ReplaceAll(tc.name, " ", "-"), tc.payload); c != tc.want {
			t.Errorf("bob grants %s: %q, want %q", tc.name, c, tc.want)
		}
	}
	if c := handle(t, p, carol, map[string]any{"id": "run-1", "kind": "tool/run"}); c != "" {
		t.Fatalf("carol's granted tool/run: %s", c)
	}

	// A grant scoped to task-1 gives nothing outside it.
	if c := handle(t, p, alice, map[string]any{"id": "open", "kind": "chat", "context": map[string]any{"id": "task-1", "type": "task"}}); c != "" {
		t.Fatal(c)
	}
	if c := grant(alice, "g-carol-task", map[string]any{"recipient": "carol", "context": "task-1",
		"capabilities": []string{"capability/grant", "gateway/kick", "note"}}); c != "" {
		t.Fatal(c)
	}
	for _, tc := range []struct {
		name string
		env  map[string]any
		want wire.Code
	}{
		{"grants itself * for the pod", map[string]any{"kind": wire.KindGrant, "payload": map[string]any{"recipient": "carol", "capabilities": []string{"*"}}}, wire.CodeCapabilityViolation},
		{"grants another pod-wide", map[string]any{"kind": wire.KindGrant, "payload": map[string]any{"recipient": "dave", "capabilities": []string{"note"}}}, wire.CodeCapabilityViolation},
		{"grants pod-wide from inside its context", map[string]any{"kind": wire.KindGrant, "context": "task-1", "payload": map[string]any{"recipient": "dave", "capabilities": []string{"note"}, "context": "other"}}, wire.CodeInvalidContext},
		{"kicks from inside its context", map[string]any{"kind": wire.RequestKick, "context": "task-1", "payload": map[string]any{"participant": "dave"}}, wire.CodeCapabilityViolation},
		{"kicks", map[string]any{"kind": wire.RequestKick, "payload": map[string]any{"participant": "dave"}}, wire.CodeCapabilityViolation},
		{"grants within its context what it holds there", map[string]any{"kind": wire.KindGrant, "context": "task-1", "payload": map[string]any{"recipient": "dave", "capabilities": []string{"note"}}}, ""},
	} {
		if c := handle(t, p, carol, tc.env); c != tc.want {
			t.Errorf("carol %s: %q, want %q", tc.name, c, tc.want)
		}
	}

	// Revoking bob's grant ends every grant bob made: he held
	// capability/grant through it alone (dave's chat too, though his
	// token gives chat), and tool/run as well (carol's).
	if c := handle(t, p, alice, map[string]any{"kind": wire.KindRevoke, "payload": map[string]any{"recipient": "bob", "grant_id": "g-bob"}}); c != "" {
		t.Fatal(c)
	}
	if c := handle(t, p, carol, map[string]any{"id": "run-2", "kind": "tool/run"}); c != wire.CodeCapabilityViolation {
		t.Fatalf("carol's tool/run after the grant it was made through was revoked: %q", c)
	}
	if l := p.grants.For("dave").List(); len(l) != 1 || l[0].Grantor != "carol" {
		t.Fatalf("dave holds %+v, want carol's note alone", l)
	}
	// Concluding task-1 ends carol's scoped grant and dave's note.
	if c := handle(t, p, alice, map[string]any{"kind": "conclusion", "context": "task-1"}); c != "" {
		t.Fatal(c)
	}
	if l := p.grants.For("dave").List(); len(l) != 0 {
		t.Fatalf("dave's grants after task-1 concluded: %+v", l)
	}
	for deadline := time.After(5 * time.Second); ; {
		select {
		case v := <-dave.in:
			if v["kind"] != wire.KindCapability {
				continue
			}
		case <-deadline:
			t.Fatal("dave was not told that his note ended")
		}
		break
	}

	// A pod read again from its history has the same grants, what each
	// was made through included (it is in the grant's frame): revoking
	// the grant bob granted through ends carol's there too.
	if c := grant(alice, "g-bob-2", map[string]any{"recipient": "bob", "capabilities": []string{"capability/grant", "tool/*"}}); c != "" {
		t.Fatal(c)
	}
	if c := grant(bob, "g-carol-2", map[string]any{"recipient": "carol", "capabilities": []string{"tool/run"}}); c != "" {
		t.Fatal(c)
	}
	// What the pod has accepted is stored (behind) before it is read again.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.Writer.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	p.Close()
	p = openPod(t, n, "delegation")
	if l := p.grants.For("carol").List(); len(l) != 1 || l[0].ID != "g-carol-2" || strings.Join(l[0].Via, ",") != "g-bob-2" {
		t.Fatalf("carol's grants read again: %+v", l)
	}
	alice, carol = sender(p, "alice", wire.Kinds("*")...), sender(p, "carol", wire.Kinds("chat")...)
	if c := handle(t, p, carol, map[string]any{"kind": "tool/run"}); c != "" {
		t.Fatalf("carol's tool/run after the pod was read again: %s", c)
	}
	if c := handle(t, p, alice, map[string]any{"kind": wire.KindRevoke, "payload": map[string]any{"recipient": "bob", "grant_id": "g-bob-2"}}); c != "" {
		t.Fatal(c)
	}
	if c := handle(t, p, carol, map[string]any{"kind": "tool/run"}); c != wire.CodeCapabilityViolation {
		t.Fatalf("carol's tool/run after g-bob-2 was revoked: %q", c)
	}
}
