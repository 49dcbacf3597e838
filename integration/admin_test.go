package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
	"github.com/mcpp/gateway/wire"
)

// Issue 37: the operator's API (docs/protocol.md section 7). An operator
// whose token holds gateway/admin lists the pods with who is in them and
// what is pending and granted, revokes a grant and kicks a participant
// through the pods' own order (as system:admin: every node applies it,
// the history keeps it), and drains a node.

// adminAnswer is an answer of the operator's API.
type adminAnswer struct {
	status int
	header http.Header
	body   []byte
}

// refusal reads a refusal's body.
func (a adminAnswer) refusal() wire.Refusal {
	var r wire.Refusal
	_ = json.Unmarshal(a.body, &r)
	return r
}

// into reads a 200's body into v, failing the test otherwise.
func (a adminAnswer) into(t *testing.T, what string, v any) {
	t.Helper()
	if a.status != http.StatusOK {
		t.Fatalf("%s: HTTP %d %s", what, a.status, a.body)
	}
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("%s: %v: %s", what, err, a.body)
	}
}

// adminCall calls the operator's API of base: method on path, with token
// as a Bearer token ("" for none), body as JSON (nil: none; a string is
// sent as it is) with Content-Type application/json unless header says
// otherwise.
func adminCall(t *testing.T, base, method, path, token string, body any, header ...string) adminAnswer {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		rd = bytes.NewReader(harness.MustJSON(t, b))
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return adminAnswer{status: resp.StatusCode, header: resp.Header, body: b}
}

// listPods lists every pod of base's answer to GET /admin/pods with
// query, by name.
func listPods(t *testing.T, base, token, query string) (wire.AdminPods, map[string]wire.AdminPod) {
	t.Helper()
	var ans wire.AdminPods
	adminCall(t, base, http.MethodGet, wire.PathAdminPods+query, token, nil).into(t, "GET "+wire.PathAdminPods+query, &ans)
	by := map[string]wire.AdminPod{}
	for _, p := range ans.Pods {
		by[p.Name] = p
	}
	return ans, by
}

// memberIDs are the ids of members.
func memberIDs(members []wire.AdminMember) []string {
	var out []string
	for _, m := range members {
		out = append(out, m.ID)
	}
	return out
}

// closeReason is how a client's connection ended: its close frame's
// reason.
func closeReason(c *harness.Client) string {
	var ce *client.ClosedError
	if errors.As(c.CloseErr(), &ce) {
		return ce.Reason
	}
	return ""
}

// awaitLeave skips what c receives until id leaves, and returns that
// presence event.
func awaitLeave(t *testing.T, c *harness.Client, id string) harness.Msg {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		m := c.Next(time.Until(deadline))
		if m == nil {
			break
		}
		if who, _ := m.Payload()["participant"].(map[string]any); m.Kind() == "system/presence" && m.Payload()["event"] == "leave" && who["id"] == id {
			return m
		}
	}
	t.Fatalf("%s: %s did not leave within 10s", c.ID, id)
	return nil
}

// awaitEnvelope skips what c receives until an envelope of kind (and of
// id, unless id is "") and returns it.
func awaitEnvelope(t *testing.T, c *harness.Client, kind, id string) harness.Msg {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		m := c.Next(time.Until(deadline))
		if m == nil {
			break
		}
		if m.Kind() == kind && (id == "" || m.Str("id") == id) {
			return m
		}
	}
	t.Fatalf("%s: no %s %q within 10s", c.ID, kind, id)
	return nil
}

// adminTokens is the token file of the operator's tests: ops operates
// every pod; mod may do anything in a pod (and grant); bob and carol chat;
// watch observes.
const adminTokens = `{"tokens": [
  {"token": "ops-t", "participant": "ops", "capabilities": ["gateway/admin"], "pods": ["*"]},
  {"token": "mod-t", "participant": "mod", "capabilities": ["*"], "pods": ["*"]},
  {"token": "bob-t", "participant": "bob", "capabilities": ["chat"], "pods": ["*"]},
  {"token": "carol-t", "participant": "carol", "capabilities": ["chat"], "pods": ["*"]},
  {"token": "watch-t", "participant": "watch", "capabilities": ["gateway/observe"], "pods": ["*"]}
]}`

func TestAdminOperatesPods(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.Tokens = harness.WriteFile(t, "tokens.json", adminTokens)
		c.ShutdownTimeout = 5 * time.Second
	})
	bob := g.DialToken(t, "adm-lab", "bob-t", true, "")
	bob2 := g.DialToken(t, "adm-two", "bob-t", true, "")
	carol := g.DialToken(t, "adm-lab", "carol-t", true, "")
	watch := g.DialToken(t, "adm-lab", "watch-t", true, "observe=1")
	mod := g.DialToken(t, "adm-lab", "mod-t", true, "")
	harness.PresenceOf(t, bob.Expect(), "join", "carol")
	harness.PresenceOf(t, bob.Expect(), "join", "mod")
	mod.Send(map[string]any{"id": "g-bob", "kind": "capability/grant", "payload": map[string]any{"recipient": "bob", "capabilities": []string{"tool/*"}}})
	bob.ExpectEnvelope("capability/grant", "g-bob")
	carol.Send(map[string]any{"id": "c1", "kind": "chat", "context": map[string]any{"id": "r1", "type": "reasoning"}})
	bob.ExpectEnvelope("chat", "c1")

	// The listing: each pod with its members, observers, contexts, grants.
	ans, pods := listPods(t, g.URL, "ops-t", "")
	if !ans.Complete || len(ans.Nodes) != 1 || !ans.Nodes[0].Answered || ans.Next != nil || len(ans.Pods) != 2 {
		t.Fatalf("the listing: %+v", ans)
	}
	lab := pods["adm-lab"]
	if got := memberIDs(lab.Members); !slices.Equal(got, []string{"bob", "carol", "mod"}) || lab.MemberCount != 3 || lab.Observers != 1 ||
		lab.Contexts.Active != 1 || lab.Grants != 1 || lab.Bans != 0 || lab.ProposalsPending != 0 || !slices.Equal(lab.Nodes, []string{ans.Node}) {
		t.Fatalf("adm-lab: %+v", lab)
	}
	m := lab.Members[0]
	if m.Node != ans.Node || m.Via == nil || *m.Via != "ws" || m.Since == nil || m.Addr == nil || !strings.HasPrefix(*m.Addr, "127.0.0.1:") ||
		m.Queue == nil || m.Protocol != wire.ProtocolMCPP || len(m.Capabilities) != 1 || m.Capabilities[0].Kind != "chat" {
		t.Fatalf("bob in the listing: %+v", m)
	}
	if since, err := time.Parse(time.RFC3339, *m.Since); err != nil || time.Since(since) > time.Minute || time.Since(since) < 0 {
		t.Fatalf("bob's since: %q %v", *m.Since, err)
	}
	if two := pods["adm-two"]; !slices.Equal(memberIDs(two.Members), []string{"bob"}) || two.Grants != 0 {
		t.Fatalf("adm-two: %+v", two)
	}
	// Pages: one pod at a time, the cursor in next.
	first, _ := listPods(t, g.URL, "ops-t", "?limit=1")
	if len(first.Pods) != 1 || first.Pods[0].Name != "adm-lab" || first.Next == nil || *first.Next != "adm-lab" {
		t.Fatalf("the first page of one: %+v", first)
	}
	second, _ := listPods(t, g.URL, "ops-t", "?limit=1&after="+*first.Next)
	if len(second.Pods) != 1 || second.Pods[0].Name != "adm-two" || second.Next != nil {
		t.Fatalf("the second page of one: %+v", second)
	}

	// One pod in full: its grant (by id, for a revoke) and its context.
	var detail wire.AdminPodAnswer
	adminCall(t, g.URL, http.MethodGet, wire.PathAdminPods+"/adm-lab", "ops-t", nil).into(t, "adm-lab in full", &detail)
	d := detail.Pod
	if len(d.GrantsInForce) != 1 || d.GrantsInForce[0].GrantID != "g-bob" || d.GrantsInForce[0].Recipient != "bob" || d.GrantsInForce[0].Grantor != "mod" ||
		len(d.ActiveContexts) != 1 || d.ActiveContexts[0].ID != "r1" || len(d.BansInForce) != 0 || len(d.PendingProposals) != 0 {
		t.Fatalf("adm-lab in full: %+v", d)
	}
	if a := adminCall(t, g.URL, http.MethodGet, wire.PathAdminPods+"/adm-none", "ops-t", nil); a.status != http.StatusNotFound || a.refusal().Code != wire.CodeNotFound {
		t.Fatalf("a pod nobody is in: %d %s", a.status, a.body)
	}

	// The operator revokes mod's grant: through the pod's order, as
	// system:admin; bob is told, and may no longer use it.
	var rv wire.AdminRevokeAnswer
	adminCall(t, g.URL, http.MethodPost, wire.PathAdminRevoke, "ops-t", wire.AdminRevoke{Pod: "adm-lab", GrantID: "g-bob", Reason: "audit"}).into(t, "the revoke", &rv)
	if rv.By != wire.AdminID || rv.Revoked.GrantID != "g-bob" || rv.Revoked.Grantor != "mod" || rv.Revoked.Recipient != "bob" || rv.Revoked.Event != wire.CapabilityRevoked {
		t.Fatalf("the revoke's answer: %+v", rv)
	}
	sawEvent, sawRevoke := false, false
	for !sawEvent || !sawRevoke {
		m := bob.NextOf()
		switch {
		case m.Kind() == "system/capability" && m.Payload()["event"] == "revoked" && m.Payload()["grant_id"] == "g-bob":
			sawEvent = true
		case m.Kind() == "capability/revoke" && m.Str("from") == wire.AdminID && m.Payload()["grant_id"] == "g-bob":
			sawRevoke = true
		default:
			t.Fatalf("bob got %v while waiting for the revoke", m)
		}
	}
	bob.Send(map[string]any{"id": "t1", "kind": "tool/run"})
	bob.ExpectErr("capability_violation")
	if a := adminCall(t, g.URL, http.MethodPost, wire.PathAdminRevoke, "ops-t", wire.AdminRevoke{Pod: "adm-lab", GrantID: "g-bob"}); a.status != http.StatusNotFound || a.refusal().Code != wire.CodeNotFound {
		t.Fatalf("the same revoke again: %d %s", a.status, a.body)
	}
	// The history keeps it, from system:admin, for nodes that open the pod later.
	status, body := post(t, g, "adm-lab", "carol-t", map[string]any{"kind": "gateway/history", "payload": map[string]any{"limit": 10, "fold": false}})
	if status != http.StatusOK || !harness.HistoryOff() && !strings.Contains(string(body), `"from":"system:admin","to":["bob"],"kind":"capability/revoke"`) {
		t.Fatalf("the history after the revoke: %d %s", status, body)
	}

	// The operator kicks bob from every pod where he is, with a ban.
	var kick wire.AdminKickAnswer
	adminCall(t, g.URL, http.MethodPost, wire.PathAdminKick, "ops-t", wire.AdminKick{Participant: "bob", Reason: "spam", BanMS: 60000}).into(t, "the kick", &kick)
	if !kick.Complete || len(kick.Kicks) != 2 || kick.Kicks[0].Pod != "adm-lab" || kick.Kicks[1].Pod != "adm-two" ||
		kick.Kicks[0].Connections != 1 || kick.Kicks[1].Connections != 1 || kick.Kicks[0].BannedUntil == nil || kick.Kicks[0].Error != "" {
		t.Fatalf("the kick's answer: %+v", kick)
	}
	for _, c := range []*harness.Client{bob, bob2} {
		if code := c.WaitClosed(5 * time.Second); code != wire.CloseKicked || closeReason(c) != "kicked by system:admin: spam" {
			t.Fatalf("bob's connection: %d %q", code, closeReason(c))
		}
	}
	leave := awaitLeave(t, carol, "bob")
	if leave.Payload()["reason"] != "kicked by system:admin: spam" {
		t.Fatalf("carol saw bob leave with %v", leave)
	}
	if status, code := harness.Refusal(t, g.WS, url.Values{"pod": {"adm-lab"}}, harness.Bearer("bob-t")); status != http.StatusForbidden || code != "forbidden" {
		t.Fatalf("bob joins again: %d %s", status, code)
	}
	// A pod nobody is in, named: opened for the kick, and the ban holds.
	adminCall(t, g.URL, http.MethodPost, wire.PathAdminKick, "ops-t", wire.AdminKick{Participant: "bob", Pods: []string{"adm-empty"}, BanMS: 60000}).into(t, "the kick in adm-empty", &kick)
	if len(kick.Kicks) != 1 || kick.Kicks[0].Pod != "adm-empty" || kick.Kicks[0].Connections != 0 || kick.Kicks[0].BannedUntil == nil {
		t.Fatalf("the kick in adm-empty: %+v", kick)
	}
	if status, _ := harness.Refusal(t, g.WS, url.Values{"pod": {"adm-empty"}}, harness.Bearer("bob-t")); status != http.StatusForbidden {
		t.Fatalf("bob joins adm-empty after its kick: %d", status)
	}
	adminCall(t, g.URL, http.MethodGet, wire.PathAdminPods+"/adm-lab", "ops-t", nil).into(t, "adm-lab after the kick", &detail)
	if b := detail.Pod.BansInForce; len(b) != 1 || b[0].Participant != "bob" || b[0].By != wire.AdminID || b[0].Reason != "spam" || detail.Pod.Grants != 0 {
		t.Fatalf("adm-lab's bans after the kick: %+v", detail.Pod)
	}

	// The drain: carol, mod and the watcher are told 1001; the node
	// accepts nothing more, and says so.
	var drained wire.AdminDrainAnswer
	adminCall(t, g.URL, http.MethodPost, wire.PathAdminDrain, "ops-t", struct{}{}).into(t, "the drain", &drained)
	if !drained.Draining || drained.Already || drained.Connections != 3 || drained.Dropped != 0 || drained.Node != ans.Node {
		t.Fatalf("the drain's answer: %+v", drained)
	}
	for _, c := range []*harness.Client{carol, mod, watch} {
		if code := c.WaitClosed(5 * time.Second); code != wire.CloseGoingAway {
			t.Fatalf("%s after the drain: %d", c.ID, code)
		}
	}
	if !g.Draining() {
		t.Fatal("Draining() is false after the drain")
	}
	if status, _, _ := harness.HTTPGet(g.URL + "/healthz"); status != http.StatusServiceUnavailable {
		t.Fatalf("/healthz after the drain: %d", status)
	}
	if status, code := harness.Refusal(t, g.WS, url.Values{"pod": {"adm-lab"}}, harness.Bearer("carol-t")); status != http.StatusServiceUnavailable || code != "shutting_down" {
		t.Fatalf("a join after the drain: %d %s", status, code)
	}
	ans, _ = listPods(t, g.URL, "ops-t", "")
	if !ans.Nodes[0].Draining {
		t.Fatalf("the listing after the drain: %+v", ans.Nodes)
	}
	if a := adminCall(t, g.URL, http.MethodPost, wire.PathAdminKick, "ops-t", wire.AdminKick{Participant: "carol"}); a.status != http.StatusServiceUnavailable || a.refusal().Code != wire.CodeShuttingDown {
		t.Fatalf("a kick through a drained node: %d %s", a.status, a.body)
	}
	adminCall(t, g.URL, http.MethodPost, wire.PathAdminDrain, "ops-t", "").into(t, "the drain again", &drained)
	if !drained.Already || drained.Connections != 3 {
		t.Fatalf("the drain again: %+v", drained)
	}
}
