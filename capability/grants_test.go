package capability_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/contexts"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/limits"
	"github.com/mcpp/gateway/wire"
)

func grant(t testing.TB, id, grantor, ctx, caps string) capability.Grant {
	t.Helper()
	return capability.Grant{ID: id, Grantor: grantor, Context: ctx, Capabilities: compile(t, caps)}
}

func TestGrantUnscoped(t *testing.T) {
	var g capability.Grants
	if g.Allows("chat", nil, capability.Where{}) {
		t.Fatal("no grant allows chat")
	}
	if err := g.Add(grant(t, "g1", "alice", "", `["chat", {"kind": "mcp/request", "payload": {"method": "tools/call", "params": {"name": "read_*"}}}]`)); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		kind, payload, ctx string
		ancestors          []string
		want               bool
	}{
		{"chat", ``, "", nil, true},
		{"chat", ``, "task", []string{"root"}, true}, // in any context
		{"mcp/request", `{"method": "tools/call", "params": {"name": "read_file"}}`, "", nil, true},
		{"mcp/request", `{"method": "tools/call", "params": {"name": "write_file"}}`, "", nil, false},
		{"note", ``, "", nil, false},
		{"system/error", ``, "", nil, false},
	}
	for _, c := range cases {
		if got := g.Allows(c.kind, []byte(c.payload), capability.Where{Context: c.ctx, Ancestors: c.ancestors}); got != c.want {
			t.Errorf("Allows(%s %s in %q %q) = %v, want %v", c.kind, c.payload, c.ctx, c.ancestors, got, c.want)
		}
	}
	if g.Scoped() {
		t.Error("Scoped() with no scoped grant")
	}
}

// TestGrantScoped: a grant scoped to a context holds in it and below it,
// nowhere else, and not once the context has concluded.
func TestGrantScoped(t *testing.T) {
	var g capability.Grants
	if err := g.Add(grant(t, "g1", "alice", "task", `["mcp/*"]`)); err != nil {
		t.Fatal(err)
	}
	if err := g.Add(grant(t, "g2", "alice", "", `["chat"]`)); err != nil {
		t.Fatal(err)
	}
	if !g.Scoped() {
		t.Error("Scoped() is false with a scoped grant")
	}
	cases := []struct {
		ctx       string
		ancestors []string
		want      bool
	}{
		{"task", nil, true},
		{"task-step", []string{"task"}, true},
		{"deeper", []string{"task-step", "task", "root"}, true},
		{"other", nil, false},
		{"other", []string{"root"}, false},
		{"root", nil, false}, // above the scope
		{"", nil, false},     // no context
	}
	for _, c := range cases {
		if got := g.Allows("mcp/request", nil, capability.Where{Context: c.ctx, Ancestors: c.ancestors}); got != c.want {
			t.Errorf("mcp/request in %q %q: %v, want %v", c.ctx, c.ancestors, got, c.want)
		}
	}
	if got := g.EndContext("other"); got != nil {
		t.Errorf("EndContext(other) = %v, want none", got)
	}
	ended := g.EndContext("task")
	if len(ended) != 1 || ended[0].ID != "g1" || ended[0].Context != "task" || ended[0].Grantor != "alice" {
		t.Fatalf("EndContext(task) = %+v, want g1", ended)
	}
	if g.Allows("mcp/request", nil, capability.Where{Context: "task"}) || g.Allows("mcp/request", nil, capability.Where{Context: "task-step", Ancestors: []string{"task"}}) {
		t.Error("the grant holds after its context concluded")
	}
	if !g.Allows("chat", nil, capability.Where{Context: "task"}) {
		t.Error("the unscoped grant ended with the context")
	}
	if g.Scoped() {
		t.Error("Scoped() after the scoped grant ended")
	}
	if got := g.EndContext("task"); got != nil {
		t.Errorf("EndContext(task) again = %v, want none", got)
	}
}

// TestGrantScopedRegistry drives the scope with the gateway's own context
// registry: the ancestors it reports let a grant hold below its context,
// and the conclusions it reports end the grant.
func TestGrantScopedRegistry(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	reg := contexts.NewRegistry(contexts.Config{
		Contexts: limits.Contexts{
			MaxDepth: 5, ContextTimeout: time.Minute, ContextRetention: time.Minute,
			MaxContextsPerParticipant: 100, MaxContextsPerPod: 100,
			ContextRate: 1000, ContextBurst: 1000,
			ConclusionKinds: "conclusion",
		},
		Now: func() time.Time { return now },
	}, func([]contexts.Concluded) {})
	t.Cleanup(reg.Close)
	var pod capability.PodGrants
	bob := pod.For("bob")
	if pod.For("bob") != bob {
		t.Fatal("For returns another Grants for the same participant")
	}

	// send records an envelope in the registry, as ingress does once it
	// is accepted, and returns what Allows needs and what concluded.
	n := 0
	send := func(from, kind, ctxJSON string) (id string, ancestors []string, concluded []contexts.Concluded) {
		t.Helper()
		c, perr := envelope.ParseContext([]byte(ctxJSON), 4096)
		if perr != nil {
			t.Fatalf("context %s: %v", ctxJSON, perr)
		}
		n++
		var acc contexts.Accepted
		req := &contexts.Request{Context: c, Kind: kind, Sender: from, EnvelopeID: fmt.Sprint("env-", n),
			Size: 100, Now: now, Create: rate.NewLimiter(rate.Inf, 1)}
		if e := reg.Accept(req, &acc, func(*contexts.Accepted) {}); e != nil {
			t.Fatalf("Accept(%s %s): %v", kind, ctxJSON, e)
		}
		return c.ID, slices.Clone(acc.Ancestors), slices.Clone(acc.Concluded)
	}

	send("alice", "chat", `{"id": "task", "type": "work"}`)
	send("alice", "chat", `{"id": "step", "parent": "task"}`)
	send("alice", "chat", `{"id": "elsewhere"}`)
	if err := bob.Add(grant(t, "grant-1", "alice", "task", `[{"kind": "mcp/request", "payload": {"method": "tools/call"}}]`)); err != nil {
		t.Fatal(err)
	}
	call := []byte(`{"method": "tools/call", "params": {"name": "x"}}`)

	id, anc, _ := send("bob", "mcp/request", `{"id": "step"}`)
	if !slices.Equal(anc, []string{"task"}) || !bob.Allows("mcp/request", call, capability.Where{Context: id, Ancestors: anc}) {
		t.Errorf("in step (ancestors %q): not allowed", anc)
	}
	id, anc, _ = send("bob", "mcp/request", `{"id": "elsewhere"}`)
	if bob.Allows("mcp/request", call, capability.Where{Context: id, Ancestors: anc}) {
		t.Error("allowed outside the grant's context")
	}

	// alice concludes the task: its step concludes with it.
	_, _, concluded := send("alice", "conclusion", `{"id": "task"}`)
	var ended []capability.Ended
	for _, c := range concluded {
		ended = append(ended, pod.EndContext(c.ID)...)
	}
	if len(concluded) != 2 || len(ended) != 1 || ended[0].Recipient != "bob" || ended[0].ID != "grant-1" || ended[0].Context != "task" {
		t.Fatalf("concluded %d contexts, ended %+v: want task and step, and grant-1 of bob", len(concluded), ended)
	}
	// An envelope naming step now opens a new context of that id, the
	// grant no longer holds.
	id, anc, _ = send("bob", "mcp/request", `{"id": "step", "parent": "task"}`)
	if bob.Allows("mcp/request", call, capability.Where{Context: id, Ancestors: anc}) {
		t.Errorf("allowed in %s %q after task concluded", id, anc)
	}
}

func TestRevoke(t *testing.T) {
	var g capability.Grants
	for _, gr := range []capability.Grant{
		grant(t, "g1", "alice", "", `["chat"]`),
		grant(t, "g2", "carol", "", `["note"]`),
	} {
		if err := g.Add(gr); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.Revoke("g1", "carol"); !errors.Is(err, capability.ErrNotGrantor) {
		t.Errorf("carol revokes alice's grant: %v, want ErrNotGrantor", err)
	}
	if _, err := g.Revoke("nope", "alice"); !errors.Is(err, capability.ErrNoGrant) {
		t.Errorf("revoking an unknown grant: %v, want ErrNoGrant", err)
	}
	if !g.Allows("chat", nil, capability.Where{}) {
		t.Fatal("a refused revocation ended the grant")
	}
	gr, err := g.Revoke("g1", "alice")
	if err != nil || gr.ID != "g1" || gr.Grantor != "alice" {
		t.Fatalf("Revoke(g1, alice) = %+v, %v", gr, err)
	}
	if g.Allows("chat", nil, capability.Where{}) {
		t.Error("chat allowed after its grant was revoked")
	}
	if !g.Allows("note", nil, capability.Where{}) {
		t.Error("carol's grant went with alice's")
	}
	if _, err := g.Revoke("g1", "alice"); !errors.Is(err, capability.ErrNoGrant) {
		t.Errorf("revoking twice: %v, want ErrNoGrant", err)
	}
}

func TestRevokeCapabilities(t *testing.T) {
	var g capability.Grants
	for _, gr := range []capability.Grant{
		grant(t, "g1", "alice", "", `["chat", {"kind": "mcp/request", "payload": {"method": "tools/call", "params": {"name": "read_*"}}}]`),
		grant(t, "g2", "alice", "task", `["mcp/response", "mcp/request:tools/*", "note"]`),
		grant(t, "g3", "carol", "", `["mcp/*"]`),
	} {
		if err := g.Add(gr); err != nil {
			t.Fatal(err)
		}
	}
	// The same payload pattern, its keys in another order.
	revs, err := g.RevokeCapabilities("alice", parseCaps(t, `[{"kind": "mcp/request", "payload": {"params": {"name": "read_*"}, "method": "tools/call"}}]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(revs) != 1 || revs[0].Grant.ID != "g1" || revs[0].Ended || len(revs[0].Removed) != 1 || revs[0].Removed[0].Kind != "mcp/request" {
		t.Fatalf("revocations %+v: want the mcp/request pattern of g1", revs)
	}
	call := []byte(`{"method": "tools/call", "params": {"name": "read_file"}}`)
	if !g.Allows("chat", nil, capability.Where{}) {
		t.Error("the rest of g1 went too")
	}

	// A kind pattern takes what it covers, payload patterns included, from
	// alice's grants only.
	revs, err = g.RevokeCapabilities("alice", parseCaps(t, `["mcp/*"]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(revs) != 1 || revs[0].Grant.ID != "g2" || revs[0].Ended || len(revs[0].Removed) != 2 {
		t.Fatalf("revocations %+v: want mcp/response and mcp/request:tools/* of g2", revs)
	}
	if !g.Allows("note", nil, capability.Where{Context: "task"}) {
		t.Error("note of g2 went too")
	}
	if !g.Allows("mcp/request", call, capability.Where{}) {
		t.Error("carol's mcp/* went too")
	}
	got := g.List()
	if len(got) != 3 || got[1].ID != "g2" || got[1].Context != "task" || got[1].Capabilities.Len() != 1 {
		t.Fatalf("List() = %+v", got)
	}

	// Taking its last capability ends a grant.
	revs, err = g.RevokeCapabilities("alice", parseCaps(t, `["note", "chat", "nothing/granted"]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(revs) != 2 || !revs[0].Ended || !revs[1].Ended {
		t.Fatalf("revocations %+v: want g1 and g2 ended", revs)
	}
	if ids := g.List(); len(ids) != 1 || ids[0].ID != "g3" {
		t.Errorf("List() = %+v, want g3 alone", ids)
	}
	if revs, err := g.RevokeCapabilities("alice", parseCaps(t, `["*"]`)); err != nil || len(revs) != 0 {
		t.Errorf("revoking what is no longer granted: %+v, %v", revs, err)
	}
	if _, err := g.RevokeCapabilities("alice", []wire.Capability{{Kind: ""}}); !errors.Is(err, capability.ErrEmptyKind) {
		t.Errorf("revoking an empty kind: %v, want ErrEmptyKind", err)
	}
}

func TestKindCovers(t *testing.T) {
	cases := []struct {
		r, c string
		want bool
	}{
		{"*", "anything", true},
		{"*", "mcp/*", true},
		{"mcp/*", "mcp/request", true},
		{"mcp/*", "mcp/request:*", true},
		{"mcp/*", "mcp/*", true},
		{"mcp/*", "mcp*", false},
		{"mcp/*", "*", false},
		{"mcp/request", "mcp/request", true},
		{"mcp/request", "mcp/request:*", false},
		{"mcp/request", "mcp/*", false},
	}
	for _, c := range cases {
		if got := capability.KindCovers(c.r, c.c); got != c.want {
			t.Errorf("KindCovers(%q, %q) = %v, want %v", c.r, c.c, got, c.want)
		}
	}
}

func TestAddRefuses(t *testing.T) {
	var g capability.Grants
	ok := grant(t, "g1", "alice", "", `["chat"]`)
	cases := []struct {
		name string
		gr   capability.Grant
		err  error
	}{
		{"no id", capability.Grant{Grantor: "alice", Capabilities: ok.Capabilities}, capability.ErrInvalidGrant},
		{"no grantor", capability.Grant{ID: "x", Capabilities: ok.Capabilities}, capability.ErrInvalidGrant},
		{"no capability", capability.Grant{ID: "x", Grantor: "alice", Capabilities: compile(t, `[]`)}, capability.ErrInvalidGrant},
		{"nil capabilities", capability.Grant{ID: "x", Grantor: "alice"}, capability.ErrInvalidGrant},
	}
	for _, c := range cases {
		if err := g.Add(c.gr); !errors.Is(err, c.err) {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
		}
	}
	if err := g.Add(ok); err != nil {
		t.Fatal(err)
	}
	if err := g.Add(ok); !errors.Is(err, capability.ErrDuplicateGrant) {
		t.Errorf("the same id twice: %v, want ErrDuplicateGrant", err)
	}
	for i := 1; i < capability.MaxGrants; i++ {
		if err := g.Add(grant(t, fmt.Sprint("more-", i), "alice", "", `["chat"]`)); err != nil {
			t.Fatalf("grant %d: %v", i+1, err)
		}
	}
	if err := g.Add(grant(t, "one-too-many", "alice", "", `["chat"]`)); !errors.Is(err, capability.ErrTooManyGrants) {
		t.Errorf("grant %d: %v, want ErrTooManyGrants", capability.MaxGrants+1, err)
	}
}

func TestPodGrantsEndContext(t *testing.T) {
	var pod capability.PodGrants
	for _, r := range []struct{ recipient, id, ctx string }{
		{"zoe", "z1", "task"}, {"bob", "b1", "task"}, {"bob", "b2", "other"}, {"bob", "b3", "task"}, {"amy", "a1", ""},
	} {
		if err := pod.For(r.recipient).Add(grant(t, r.id, "alice", r.ctx, `["chat"]`)); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, e := range pod.EndContext("task") {
		got = append(got, e.Recipient+":"+e.ID)
	}
	if want := []string{"bob:b1", "bob:b3", "zoe:z1"}; !slices.Equal(got, want) {
		t.Errorf("EndContext(task) = %q, want %q", got, want)
	}
	if !pod.For("bob").Allows("chat", nil, capability.Where{Context: "other"}) || !pod.For("amy").Allows("chat", nil, capability.Where{}) {
		t.Error("grants of other contexts ended too")
	}
}

// TestGrantsConcurrent: envelopes are checked while grants change (run
// with -race). Each reader sees a grant either wholly in force or not.
func TestGrantsConcurrent(t *testing.T) {
	var g capability.Grants
	if err := g.Add(grant(t, "base", "alice", "", `["chat"]`)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if !g.Allows("chat", nil, capability.Where{}) {
					t.Error("the grant that never changes was not seen")
					return
				}
				g.Allows("mcp/request", []byte(`{"method": "tools/call"}`), capability.Where{Context: "task", Ancestors: []string{"root"}})
			}
		})
	}
	for i := range 200 {
		id := fmt.Sprint("g", i)
		if err := g.Add(grant(t, id, "alice", "task", `[{"kind": "mcp/request", "payload": {"method": "tools/*"}}]`)); err != nil {
			t.Fatal(err)
		}
		if !g.Allows("mcp/request", []byte(`{"method": "tools/call"}`), capability.Where{Context: "task"}) {
			t.Fatal("a grant is not in force for the next envelope")
		}
		if i%2 == 0 {
			g.EndContext("task")
		} else if _, err := g.Revoke(id, "alice"); err != nil {
			t.Fatal(err)
		}
		if g.Allows("mcp/request", []byte(`{"method": "tools/call"}`), capability.Where{Context: "task"}) {
			t.Fatal("an ended grant still holds for the next envelope")
		}
	}
	close(stop)
	wg.Wait()
}

// TestGrantScopedToRecipient: a grant scoped to a recipient holds for an
// envelope addressed to it alone, and covers (for a grantor that holds
// it) only a grant scoped to the same recipient.
func TestGrantScopedToRecipient(t *testing.T) {
	var g capability.Grants
	gr := grant(t, "g1", "alice", "", `[{"kind": "mcp/request", "payload": {"method": "tools/call", "params": {"name": "echo"}}}]`)
	gr.To = "srv"
	if err := g.Add(gr); err != nil {
		t.Fatal(err)
	}
	call := []byte(`{"method": "tools/call", "params": {"name": "echo"}}`)
	for _, c := range []struct {
		to   []string
		want bool
	}{
		{[]string{"srv"}, true},
		{[]string{"srv2"}, false},
		{nil, false},
		{[]string{"srv", "srv2"}, false},
		{[]string{"srv2", "srv"}, false},
	} {
		if got := g.Allows("mcp/request", call, capability.Where{To: c.to}); got != c.want {
			t.Errorf("to %q: Allows = %v, want %v", c.to, got, c.want)
		}
		if _, got := g.Allowing("mcp/request", call, capability.Where{To: c.to}); got != c.want {
			t.Errorf("to %q: Allowing = %v, want %v", c.to, got, c.want)
		}
	}
	granted := compile(t, `[{"kind": "mcp/request", "payload": {"method": "tools/call", "params": {"name": "echo"}}}]`)
	if _, ok := g.Covering(granted, 0, capability.Where{To: []string{"srv"}}); !ok {
		t.Error("a grant scoped to srv does not cover the same grant scoped to srv")
	}
	if _, ok := g.Covering(granted, 0, capability.Where{}); ok {
		t.Error("a grant scoped to srv covers a grant to any recipient")
	}
	if _, ok := g.Covering(granted, 0, capability.Where{To: []string{"srv2"}}); ok {
		t.Error("a grant scoped to srv covers a grant scoped to srv2")
	}
}
