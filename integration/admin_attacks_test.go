package integration

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
	"github.com/mcpp/gateway/wire"
)

// Issue 37: every call of the operator's API is refused without the
// gateway/admin capability, tried as an attacker tries it: no token, a
// token of another kind, a wildcard, a payload pattern, a grant made in a
// pod, the token in the URL, other spellings of the paths, a token for
// other pods, a page of another origin, a forged sender.

// atkTokens are the attackers' tokens and two operators': ops reaches
// every pod, labops the atk-lab-* pods alone.
const atkTokens = `{"tokens": [
  {"token": "ops-t", "participant": "ops", "capabilities": ["gateway/admin"], "pods": ["*"]},
  {"token": "labops-t", "participant": "labops", "capabilities": ["gateway/admin"], "pods": ["atk-lab-*"]},
  {"token": "braced-t", "participant": "braced", "capabilities": [{"kind": "gateway/admin", "payload": {}}], "pods": ["*"]},
  {"token": "star-t", "participant": "star", "capabilities": ["*"], "pods": ["*"]},
  {"token": "star2-t", "participant": "star2", "capabilities": ["*"], "pods": ["*"]},
  {"token": "gwstar-t", "participant": "gwstar", "capabilities": ["gateway/*", "chat"], "pods": ["*"]},
  {"token": "shaped-t", "participant": "shaped", "capabilities": [{"kind": "gateway/admin", "payload": {"pod": "atk-lab-1"}}], "pods": ["*"]},
  {"token": "mallory-t", "participant": "mallory", "capabilities": ["chat"], "pods": ["*"]},
  {"token": "bob-t", "participant": "bob", "capabilities": ["chat"], "pods": ["*"]}
]}`

// adminEndpoints are one call of each endpoint, each of which would
// change or reveal something.
var adminEndpoints = []struct {
	method, path string
	body         any
}{
	{http.MethodGet, wire.PathAdminPods, nil},
	{http.MethodGet, wire.PathAdminPods + "?cluster=1", nil},
	{http.MethodGet, wire.PathAdminPods + "/atk-lab-1", nil},
	{http.MethodPost, wire.PathAdminKick, wire.AdminKick{Participant: "bob"}},
	{http.MethodPost, wire.PathAdminRevoke, wire.AdminRevoke{Pod: "atk-lab-1", GrantID: "g-bob"}},
	{http.MethodPost, wire.PathAdminDrain, struct{}{}},
}

func TestAdminAttacks(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.Tokens = harness.WriteFile(t, "tokens.json", atkTokens)
	})
	bob := g.DialToken(t, "atk-lab-1", "bob-t", true, "")
	bobElse := g.DialToken(t, "atk-other", "bob-t", true, "")
	star := g.DialToken(t, "atk-lab-1", "star-t", true, "")
	star2 := g.DialToken(t, "atk-lab-1", "star2-t", true, "")
	mallory := g.DialToken(t, "atk-lab-1", "mallory-t", true, "")
	star.Send(map[string]any{"id": "g-bob", "kind": "capability/grant", "to": []string{"bob"}, "payload": map[string]any{"recipient": "bob", "capabilities": []string{"tool/*"}}})
	star.ExpectKind("system/presence") // star2
	star.ExpectKind("system/presence") // mallory
	if a := star.ExpectKind("system/capability"); a.Payload()["event"] != "granted" {
		t.Fatalf("star's grant: %v", a)
	}
	// A grant of gateway/admin made in the pod, by one who holds "*":
	// the pod takes it (a pod grant may name any kind), and it gives
	// nothing beyond the pod.
	star.Send(map[string]any{"id": "g-mallory", "kind": "capability/grant", "to": []string{"mallory"}, "payload": map[string]any{"recipient": "mallory", "capabilities": []string{"gateway/admin", "gateway/*", "*"}}})
	if a := star.ExpectKind("system/capability"); a.Payload()["event"] != "granted" {
		t.Fatalf("star's grant of gateway/admin to mallory: %v", a)
	}
	awaitEnvelope(t, mallory, "capability/grant", "g-mallory")

	// untouched checks that no refused call changed anything.
	untouched := func(what string) {
		t.Helper()
		if g.Draining() {
			t.Fatalf("%s drained the node", what)
		}
		id := fmt.Sprintf("b-%d", time.Now().UnixNano())
		bob.Send(map[string]any{"id": id, "kind": "chat"})
		awaitEnvelope(t, star, "chat", id)
		star.Send(map[string]any{"id": id + "s", "kind": "chat"})
		awaitEnvelope(t, bob, "chat", id+"s")
		bobElse.Send(map[string]any{"kind": "chat"})
		if !bobElse.IsOpen() {
			t.Fatalf("%s closed bob's other connection", what)
		}
	}
	refuseAll := func(who, token string, status int, code wire.Code, header ...string) {
		t.Helper()
		for _, e := range adminEndpoints {
			a := adminCall(t, g.URL, e.method, e.path, token, e.body, header...)
			if a.status != status || a.refusal().Code != code {
				t.Errorf("%s: %s %s: %d %s; want %d %s", who, e.method, e.path, a.status, a.body, status, code)
			}
			if strings.Contains(string(a.body), "atk-lab-1\",\"nodes") || strings.Contains(string(a.body), `"members"`) {
				t.Errorf("%s: %s %s revealed pods: %s", who, e.method, e.path, a.body)
			}
			if status == http.StatusUnauthorized && !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s: %s %s: a 401 without a Bearer challenge: %q", who, e.method, e.path, a.header.Get("WWW-Authenticate"))
			}
		}
		untouched(who)
	}

	refuseAll("no token", "", http.StatusUnauthorized, wire.CodeUnauthorized)
	refuseAll("an unknown token", "ops-t-guess", http.StatusUnauthorized, wire.CodeUnauthorized)
	refuseAll("a Basic header", "", http.StatusUnauthorized, wire.CodeUnauthorized, "Authorization", "Basic b3BzLXQ6")
	refuseAll(`"*"`, "star-t", http.StatusForbidden, wire.CodeForbidden)
	refuseAll(`"gateway/*"`, "gwstar-t", http.StatusForbidden, wire.CodeForbidden)
	refuseAll("gateway/admin with a payload pattern", "shaped-t", http.StatusForbidden, wire.CodeForbidden)
	refuseAll("gateway/admin granted in a pod", "mallory-t", http.StatusForbidden, wire.CodeForbidden)
	refuseAll("a participant's token", "bob-t", http.StatusForbidden, wire.CodeForbidden)
	// The operator's own token, in the URL rather than the header.
	for _, e := range adminEndpoints {
		sep := "?"
		if strings.Contains(e.path, "?") {
			sep = "&"
		}
		if a := adminCall(t, g.URL, e.method, e.path+sep+"token=ops-t", "", e.body); a.status != http.StatusUnauthorized {
			t.Errorf("the operator's token in the URL: %s %s: %d %s", e.method, e.path, a.status, a.body)
		}
	}
	untouched("the token in the URL")

	// Other spellings of the paths: without the capability, none answers;
	// with it, the paths are case-sensitive (no alias), and a path that
	// cleans to another pod reaches only what the token may.
	spellings := []struct{ method, path string }{
		{http.MethodGet, "/ADMIN/pods"}, {http.MethodGet, "/Admin/Pods"}, {http.MethodGet, "/admin/PODS"},
		{http.MethodGet, "/admin/pods/"}, {http.MethodGet, "/admin/pods/atk-lab-1/"}, {http.MethodGet, "/admin/pods/atk-lab-1/../atk-other"},
		{http.MethodGet, "/admin/pods/atk-lab-1%2f..%2fatk-other"}, {http.MethodGet, "/admin"},
		{http.MethodPost, "/ADMIN/drain"}, {http.MethodPost, "/admin/Drain"}, {http.MethodPost, "/admin/drain/"},
		{http.MethodPost, "/admin//drain"}, {http.MethodPost, "/admin/./drain"}, {http.MethodPost, "/admin/kick/"},
		{http.MethodPost, "/admin/pods/../drain"}, {http.MethodPost, "/admin/%64rain"}, {http.MethodPost, "//admin/drain"},
	}
	for _, token := range []string{"", "star-t", "mallory-t"} {
		for _, c := range spellings {
			if a := adminCall(t, g.URL, c.method, c.path, token, struct{}{}); a.status == http.StatusOK || strings.Contains(string(a.body), `"members"`) {
				t.Errorf("%s %s with %q answered %d: %s", c.method, c.path, token, a.status, a.body)
			}
		}
	}
	untouched("other spellings of the paths")
	for _, c := range spellings {
		if !strings.Contains(c.path, "ADMIN") && !strings.Contains(c.path, "Admin") && !strings.Contains(c.path, "PODS") && !strings.Contains(c.path, "Drain") {
			continue
		}
		if a := adminCall(t, g.URL, c.method, c.path, "ops-t", struct{}{}); a.status == http.StatusOK {
			t.Errorf("%s %s with the operator's token answered 200: %s", c.method, c.path, a.body)
		}
	}
	for _, path := range []string{"/admin/pods/atk-lab-1/../atk-other", "/admin/pods/atk-lab-1%2f..%2fatk-other", "/admin/pods/atk-lab-1/%2e%2e/atk-other"} {
		if a := adminCall(t, g.URL, http.MethodGet, path, "labops-t", nil); a.status == http.StatusOK || strings.Contains(string(a.body), `"members"`) {
			t.Errorf("GET %s with a token for atk-lab-* answered %d: %s", path, a.status, a.body)
		}
	}
	untouched("other spellings of the paths, with operators' tokens")
	if a := adminCall(t, g.URL, http.MethodGet, wire.PathAdminKick, "ops-t", nil); a.status != http.StatusMethodNotAllowed || a.header.Get("Allow") != http.MethodPost {
		t.Errorf("GET %s: %d %v", wire.PathAdminKick, a.status, a.header)
	}
	if a := adminCall(t, g.URL, http.MethodPost, wire.PathAdminPods, "ops-t", struct{}{}); a.status != http.StatusMethodNotAllowed {
		t.Errorf("POST %s: %d", wire.PathAdminPods, a.status)
	}
	untouched("other spellings of the paths")

	// A web page of another origin, or a form (no JSON type), with the
	// operator's token (a browser that holds it).
	for _, h := range [][]string{
		{"Origin", "http://evil.example"},
		{"Content-Type", "text/plain"},
		{"Content-Type", "application/x-www-form-urlencoded"},
		{"Content-Type", "application/x-ndjson"},
	} {
		for _, e := range adminEndpoints[3:] {
			if a := adminCall(t, g.URL, e.method, e.path, "ops-t", e.body, h...); a.status != http.StatusForbidden && a.status != http.StatusUnsupportedMediaType {
				t.Errorf("%s %s with %s: %d %s", e.method, e.path, h, a.status, a.body)
			}
		}
	}
	untouched("another origin")
	// Bodies that do not fit: refused, and nothing done.
	for _, body := range []string{`{"Participant": "bob"}`, `{"participant": "bob", "pod": "atk-lab-1"}`, `{"participant": "bob"} {"participant": "x"}`,
		`{"participant": "bob", "ban_ms": -1}`, `{"participant": "bob", "pods": ["../x"]}`, `{"participant": "system:admin "}`, `[]`} {
		if a := adminCall(t, g.URL, http.MethodPost, wire.PathAdminKick, "ops-t", body); a.status != http.StatusBadRequest {
			t.Errorf("a kick of %s: %d %s", body, a.status, a.body)
		}
	}
	untouched("bodies that do not fit")

	// A token for other pods: labops lists, reads, kicks and revokes in
	// atk-lab-* alone, and may not drain.
	_, pods := listPods(t, g.URL, "labops-t", "?cluster=1")
	if _, ok := pods["atk-other"]; ok || len(pods) != 1 {
		t.Errorf("labops lists %v", pods)
	}
	for _, e := range []struct {
		method, path string
		body         any
	}{
		{http.MethodGet, wire.PathAdminPods + "/atk-other", nil},
		{http.MethodPost, wire.PathAdminKick, wire.AdminKick{Participant: "bob", Pods: []string{"atk-lab-1", "atk-other"}}},
		{http.MethodPost, wire.PathAdminRevoke, wire.AdminRevoke{Pod: "atk-other", GrantID: "g-bob"}},
		{http.MethodPost, wire.PathAdminDrain, struct{}{}},
	} {
		if a := adminCall(t, g.URL, e.method, e.path, "labops-t", e.body); a.status != http.StatusForbidden || a.refusal().Code != wire.CodeForbidden {
			t.Errorf("labops: %s %s: %d %s", e.method, e.path, a.status, a.body)
		}
	}
	untouched("a token for other pods")
	// Its kick of bob wherever he is reaches atk-lab-1 alone.
	var kick wire.AdminKickAnswer
	adminCall(t, g.URL, http.MethodPost, wire.PathAdminKick, "labops-t", wire.AdminKick{Participant: "bob"}).into(t, "labops kicks bob", &kick)
	if len(kick.Kicks) != 1 || kick.Kicks[0].Pod != "atk-lab-1" {
		t.Fatalf("labops's kick: %+v", kick)
	}
	if code := bob.WaitClosed(5 * time.Second); code != wire.CloseKicked {
		t.Fatalf("bob in atk-lab-1: %d", code)
	}
	other := g.DialToken(t, "atk-other", "star-t", true, "")
	bobElse.Send(map[string]any{"id": "still", "kind": "chat"})
	awaitEnvelope(t, other, "chat", "still")

	// Nobody but the gateway sends as system:admin, and a participant may
	// not revoke another's grant; the operator may.
	mallory.Send(map[string]any{"from": wire.AdminID, "kind": "capability/revoke", "payload": map[string]any{"recipient": "bob", "grant_id": "g-bob"}})
	if e := awaitEnvelope(t, mallory, "system/error", ""); e.ErrCode() != "auth_violation" {
		t.Fatalf("mallory's revoke as system:admin: %v", e)
	}
	star2.Send(map[string]any{"id": "r-star2", "kind": "capability/revoke", "payload": map[string]any{"recipient": "bob", "grant_id": "g-bob"}})
	if e := awaitEnvelope(t, star2, "system/error", ""); e.ErrCode() != "capability_violation" || !strings.Contains(fmt.Sprint(e.Payload()["message"]), "only its grantor may revoke it") {
		t.Fatalf("star2's revoke of star's grant: %v", e)
	}
	if status, body := post(t, g, "atk-lab-1", "star2-t", map[string]any{"from": wire.AdminID, "kind": "capability/revoke", "payload": map[string]any{"recipient": "bob", "grant_id": "g-bob"}}); status != http.StatusOK || !strings.Contains(string(body), "auth_violation") {
		t.Fatalf("a publish as system:admin: %d %s", status, body)
	}
	var detail wire.AdminPodAnswer
	adminCall(t, g.URL, http.MethodGet, wire.PathAdminPods+"/atk-lab-1", "ops-t", nil).into(t, "atk-lab-1 in full", &detail)
	var ids []string
	for _, gr := range detail.Pod.GrantsInForce {
		ids = append(ids, gr.GrantID)
	}
	if !slices.Equal(ids, []string{"g-bob", "g-mallory"}) {
		t.Fatalf("the grants in force after the refused revokes: %v", ids)
	}
	var rv wire.AdminRevokeAnswer
	adminCall(t, g.URL, http.MethodPost, wire.PathAdminRevoke, "labops-t", wire.AdminRevoke{Pod: "atk-lab-1", GrantID: "g-bob"}).into(t, "labops revokes star's grant", &rv)
	if rv.Revoked.Grantor != "star" {
		t.Fatalf("the revoke: %+v", rv)
	}

	// A payload pattern of {} is no pattern: braced operates.
	if a := adminCall(t, g.URL, http.MethodGet, wire.PathAdminPods, "braced-t", nil); a.status != http.StatusOK {
		t.Fatalf(`gateway/admin with the payload pattern {}: %d %s`, a.status, a.body)
	}
}

// The operator's capability from each source of tokens: a JWT's caps
// claim (not --default-capabilities), its pods claim bounding the pods.
func TestAdminJWTCapability(t *testing.T) {
	t.Parallel()
	g, secret, _ := jwtGateway(t, func(c *gateway.Config) {
		c.DefaultCapabilities = "*" // every JWT without caps gets "*": still no operator
	})
	bob := g.DialToken(t, "jwt-lab", signHS(t, secret, jwtClaims("bob", map[string]any{"caps": []string{"chat"}})), true, "")
	g.DialToken(t, "jwt-other", signHS(t, secret, jwtClaims("bob2", map[string]any{"caps": []string{"chat"}})), true, "")

	for _, c := range []struct {
		what   string
		claims map[string]any
		status int
	}{
		{"no caps claim (--default-capabilities *)", nil, http.StatusForbidden},
		{"caps [*]", map[string]any{"caps": []string{"*"}}, http.StatusForbidden},
		{"caps with a payload pattern", map[string]any{"caps": []any{map[string]any{"kind": "gateway/admin", "payload": map[string]any{"x": "y"}}}}, http.StatusForbidden},
		{"expired", map[string]any{"caps": []string{"gateway/admin"}, "exp": time.Now().Add(-time.Minute).Unix()}, http.StatusUnauthorized},
		{"another audience", map[string]any{"caps": []string{"gateway/admin"}, "aud": "another"}, http.StatusUnauthorized},
	} {
		tok := signHS(t, secret, jwtClaims("eve", c.claims))
		if a := adminCall(t, g.URL, http.MethodGet, wire.PathAdminPods, tok, nil); a.status != c.status {
			t.Errorf("a JWT with %s: %d %s; want %d", c.what, a.status, a.body, c.status)
		}
	}
	ops := signHS(t, secret, jwtClaims("ops", map[string]any{"caps": []string{"gateway/admin"}}))
	if _, pods := listPods(t, g.URL, ops, ""); len(pods) != 2 {
		t.Fatalf("a JWT with caps [gateway/admin] (every pod) lists %v", pods)
	}
	labops := signHS(t, secret, jwtClaims("labops", map[string]any{"caps": []string{"gateway/admin"}, "pods": []string{"jwt-lab"}}))
	if _, pods := listPods(t, g.URL, labops, ""); len(pods) != 1 || pods["jwt-lab"].Name != "jwt-lab" {
		t.Fatalf("a JWT for pod jwt-lab lists %v", pods)
	}
	if a := adminCall(t, g.URL, http.MethodPost, wire.PathAdminDrain, labops, struct{}{}); a.status != http.StatusForbidden {
		t.Fatalf("a JWT for pod jwt-lab drains: %d %s", a.status, a.body)
	}
	if !bob.IsOpen() || g.Draining() {
		t.Fatal("a refused call changed the node")
	}
}

// The operator's capability from an OAuth access token: the scope
// mcpp:cap:gateway/admin, the pods its mcpp:pod: scopes name, and a token
// for this gateway (aud), never one for a pod's MCP endpoint alone.
func TestAdminOAuthScope(t *testing.T) {
	t.Parallel()
	idp := startIdP(t, "", map[string][]string{
		idpAlice: {"mcpp:pod:*", "mcpp:pod:oadm-lab", "mcpp:cap:gateway/admin", "mcpp:cap:chat"},
		idpBob:   {"mcpp:pod:*", "mcpp:cap:chat", "mcpp:cap:gateway/kick"},
	})
	g := oauthGateway(t, idp)
	g.DialToken(t, "oadm-lab", "watch-t", true, "")
	g.DialToken(t, "oadm-other", "watch-t", true, "")

	ops := idp.token(t, hostClient, idpAlice, []string{g.URL}, []string{"openid", "mcpp:pod:*", "mcpp:cap:gateway/admin"})
	if _, pods := listPods(t, g.URL, ops, ""); len(pods) != 2 {
		t.Fatalf("an access token with mcpp:cap:gateway/admin and mcpp:pod:* lists %v", pods)
	}
	labops := idp.token(t, hostClient, idpAlice, []string{g.URL}, []string{"openid", "mcpp:pod:oadm-lab", "mcpp:cap:gateway/admin"})
	if _, pods := listPods(t, g.URL, labops, ""); len(pods) != 1 || pods["oadm-lab"].Name == "" {
		t.Fatalf("an access token with mcpp:pod:oadm-lab lists %v", pods)
	}
	if a := adminCall(t, g.URL, http.MethodPost, wire.PathAdminDrain, labops, struct{}{}); a.status != http.StatusForbidden {
		t.Fatalf("an access token for one pod drains: %d %s", a.status, a.body)
	}
	// Without a token: the challenge says where to get one, and what for.
	if a := adminCall(t, g.URL, http.MethodGet, wire.PathAdminPods, "", nil); a.status != http.StatusUnauthorized ||
		!strings.Contains(a.header.Get("WWW-Authenticate"), `resource_metadata="`+g.URL+`/.well-known/oauth-protected-resource"`) ||
		!strings.Contains(a.header.Get("WWW-Authenticate"), `scope="mcpp:cap:gateway/admin mcpp:pod:*"`) {
		t.Fatalf("no token: %d %q", a.status, a.header.Get("WWW-Authenticate"))
	}
	// The user's host asked for less: no operator.
	chat := idp.token(t, hostClient, idpAlice, []string{g.URL}, []string{"openid", "mcpp:pod:*", "mcpp:cap:chat"})
	a := adminCall(t, g.URL, http.MethodGet, wire.PathAdminPods, chat, nil)
	if ch := a.header.Get("WWW-Authenticate"); a.status != http.StatusForbidden || !strings.Contains(ch, `error="insufficient_scope"`) || !strings.Contains(ch, `scope="mcpp:cap:gateway/admin mcpp:pod:*"`) {
		t.Fatalf("an access token without the scope: %d %s %q", a.status, a.body, ch)
	}
	// bob's provider entitles him to no such scope: asking gets none.
	bob := idp.token(t, hostClient, idpBob, []string{g.URL}, []string{"openid", "mcpp:pod:*", "mcpp:cap:gateway/admin", "mcpp:cap:gateway/kick"})
	if a := adminCall(t, g.URL, http.MethodGet, wire.PathAdminPods, bob, nil); a.status != http.StatusForbidden {
		t.Fatalf("bob, whom the provider does not entitle to the scope: %d %s", a.status, a.body)
	}
	// A token for one pod's MCP endpoint is no token for the gateway.
	podOnly := idp.token(t, hostClient, idpAlice, []string{g.URL + "/mcp?pod=oadm-lab"}, []string{"openid", "mcpp:pod:*", "mcpp:cap:gateway/admin"})
	if a := adminCall(t, g.URL, http.MethodGet, wire.PathAdminPods, podOnly, nil); a.status != http.StatusUnauthorized || !strings.HasPrefix(a.refusal().Message, "aud: ") ||
		!strings.Contains(a.header.Get("WWW-Authenticate"), "resource_metadata=") {
		t.Fatalf("an access token for a pod's MCP endpoint: %d %s %q", a.status, a.body, a.header.Get("WWW-Authenticate"))
	}
	if g.Draining() {
		t.Fatal("a refused drain drained the node")
	}
}
