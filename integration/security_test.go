package integration

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
	"github.com/mcpp/gateway/wire"
)

// The tokens of the security tests: distinctive strings that must never
// appear in a log, an error message or a metric. One needs escaping in a
// query.
const (
	secAlice     = "sec-tok-alice-Q9x7v"
	secBot       = "sec-tok-bot+K2/m4=&z" // token_sha256 in the file
	secBadHeader = "sec-bad-header-Z1w8"
	secBadQuery  = "sec-bad-query-Z2p3"
)

// secSecrets are every form of the tokens a log could show.
func secSecrets() []string {
	var out []string
	for _, s := range []string{secAlice, secBot, secBadHeader, secBadQuery} {
		out = append(out, s, url.QueryEscape(s))
	}
	sum := sha256.Sum256([]byte(secBot))
	return append(out, hex.EncodeToString(sum[:]))
}

// secTokenFile writes a token file of alice (token, every pod) and bot
// (token_sha256, pods sec-lab-*) with mode perm.
func secTokenFile(t *testing.T, perm os.FileMode) string {
	t.Helper()
	sum := sha256.Sum256([]byte(secBot))
	path := harness.WriteFile(t, "tokens.json", fmt.Sprintf(`{"tokens": [
  {"token": %q, "participant": "alice", "capabilities": ["*"], "pods": ["*"]},
  {"token_sha256": %q, "participant": "bot", "capabilities": ["chat"], "pods": ["sec-lab-*"]}
]}`, secAlice, hex.EncodeToString(sum[:])))
	if err := os.Chmod(path, perm); err != nil {
		t.Fatal(err)
	}
	return path
}

// secExercise connects with good and bad tokens, by header and by query,
// to allowed and forbidden pods, sends good and refused envelopes, and is
// replaced; it returns every refusal body it got.
func secExercise(t *testing.T, g *harness.Gateway) []string {
	t.Helper()
	var bodies []string
	refuse := func(q url.Values, h http.Header, wantStatus int) {
		t.Helper()
		c, resp, err := harness.DialWebSocket(g.WS, q, h)
		if err == nil {
			_ = c.CloseNow()
			t.Fatalf("upgrade with %v succeeded", q)
		}
		if resp == nil || resp.StatusCode != wantStatus {
			t.Fatalf("upgrade with %v: %v, want HTTP %d", q, resp, wantStatus)
		}
		b, _ := io.ReadAll(resp.Body)
		bodies = append(bodies, string(b))
	}
	q := func(kv ...string) url.Values {
		v := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	refuse(q("pod", "sec-lab-1"), harness.Bearer(secBadHeader), http.StatusUnauthorized)
	refuse(q("pod", "sec-lab-1", "token", secBadQuery), nil, http.StatusUnauthorized)
	refuse(q("pod", "elsewhere"), harness.Bearer(secBot), http.StatusForbidden)
	refuse(q("pod", "elsewhere", "token", secBot), nil, http.StatusForbidden)
	refuse(q("pod", "bad pod!", "token", secAlice), nil, http.StatusBadRequest)
	refuse(q("pod", "sec-lab-1", "routing", "sideways"), harness.Bearer(secAlice), http.StatusBadRequest)

	alice := g.DialToken(t, "sec-lab-1", secAlice, true, "")
	bot := g.DialToken(t, "sec-lab-1", secBot, false, "")
	harness.PresenceOf(t, alice.Expect(), "join", "bot")
	bot.Send(map[string]any{"id": "b1", "kind": "chat"})
	alice.ExpectEnvelope("chat", "b1")
	bot.Send(map[string]any{"id": "b2", "kind": "mcp/request:x"}) // capability_violation
	bot.ExpectErr("capability_violation")
	alice.SendRaw([]byte(`{"kind":`))
	alice.ExpectErr("invalid_json")
	// A second connection of alice, by query this time, replaces the first.
	again := g.DialToken(t, "sec-lab-1", secAlice, false, "")
	if code := alice.WaitClosed(5 * time.Second); code != 4000 {
		t.Fatalf("replaced with %d", code)
	}
	again.Send(map[string]any{"id": "a1", "kind": "chat"})
	bot.ExpectEnvelope("chat", "a1")
	for _, w := range []harness.Msg{alice.Welcome, bot.Welcome, again.Welcome} {
		b, _ := json.Marshal(w)
		bodies = append(bodies, string(b))
	}
	_, metrics, _ := harness.HTTPGet(g.URL + "/metrics")
	return append(bodies, metrics)
}

// secNoSecret fails for each secret found in text.
func secNoSecret(t *testing.T, what, text string) {
	t.Helper()
	for _, s := range secSecrets() {
		if strings.Contains(text, s) {
			t.Errorf("%s shows the secret %q", what, s)
		}
	}
}

// TestSecurityTokensNotLogged: with a token file and debug logging, good
// and bad tokens, by header and by ?token=, to allowed and forbidden pods,
// leave no trace of any token (nor of the hash in the file) in the
// gateway's logs, its refusal bodies, its welcomes or its metrics.
func TestSecurityTokensNotLogged(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = secTokenFile(t, 0o600) })
	bodies := secExercise(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = g.Shutdown(ctx) // its logs too
	secNoSecret(t, "the log", g.Logs.String())
	for i, b := range bodies {
		secNoSecret(t, fmt.Sprintf("answer %d", i), b)
	}
}

// TestSecurityTokensNotInProcessLogs: the same with the mcpp-gateway
// process at --log-level debug, from its start to its exit.
func TestSecurityTokensNotInProcessLogs(t *testing.T) {
	t.Parallel()
	p := harness.StartGatewayProc(t, nil, "--listen", "127.0.0.1:0", "--tokens", secTokenFile(t, 0o600), "--log-level", "debug")
	secExercise(t, p.GW)
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited:
	case <-time.After(20 * time.Second):
		t.Fatal("gateway did not exit after SIGTERM")
	}
	secNoSecret(t, "the process's log", p.Stderr.String())
}

// TestSecurityTokenFileMode: a token file that others than its owner and
// its group may read, or that its group may write, gets a warning naming it
// in the log; one only its owner (or its group, as a Kubernetes Secret
// mounted with fsGroup is) may read gets none.
func TestSecurityTokenFileMode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		perm os.FileMode
		warn bool
	}{{0o644, true}, {0o604, true}, {0o660, true}, {0o640, false}, {0o600, false}, {0o400, false}} {
		path := secTokenFile(t, tc.perm)
		g := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = path })
		// Serving before the test ends (TestFaultShutdownDuringStart is
		// about a shutdown that comes first).
		harness.Eventually(t, 10*time.Second, "/healthz 200", func() bool {
			status, _, err := harness.HTTPGet(g.URL + "/healthz")
			return err == nil && status == http.StatusOK
		})
		warned := false
		for _, line := range strings.Split(g.Logs.String(), "\n") {
			if strings.Contains(line, "level=WARN") && strings.Contains(line, path) {
				warned = true
			}
		}
		if warned != tc.warn {
			t.Errorf("token file mode %v: warned %v, want %v; log:\n%s", tc.perm, warned, tc.warn, g.Logs)
		}
		secNoSecret(t, fmt.Sprintf("the log with mode %v", tc.perm), g.Logs.String())
	}
}

// TestSecurityAllowedOrigins: with --allowed-origins, a page from another
// origin is refused with 403 and the JSON body of every refused upgrade
// (docs/protocol.md section 1), and nothing is kept for it; the gateway's own
// origin, the allowed patterns and clients that send no Origin (agents) are
// accepted.
func TestSecurityAllowedOrigins(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.AllowedOrigins = "app.example.com,*.example.org" })
	own := "http://" + strings.TrimPrefix(g.URL, "http://")
	accepted := []string{"", own, "https://app.example.com", "http://app.example.com", "https://x.example.org", "https://a.b.example.org"}
	refused := []string{"https://evil.example.net", "https://app.example.com.evil.net", "https://example.org",
		"https://app.example.com:8443", "null", "http://localhost", "file://"}
	for i, origin := range accepted {
		h := http.Header{}
		if origin != "" {
			h.Set("Origin", origin)
		}
		c, err := harness.DialConn(g.WS, url.Values{"pod": {"sec-origin"}, "participant": {fmt.Sprintf("ok-%d", i)}}, h)
		if err != nil {
			t.Errorf("Origin %q refused: %v", origin, err)
			continue
		}
		cl := harness.StartClient(t, c, true)
		_ = cl.Conn.CloseNow()
	}
	harness.Eventually(t, 5*time.Second, "no pod left", func() bool { return harness.Metric(t, g.URL, "mcpp_pods") == 0 })
	for i, origin := range refused {
		c, resp, err := harness.DialWebSocket(g.WS, url.Values{"pod": {"sec-refused"}, "participant": {fmt.Sprintf("no-%d", i)}},
			http.Header{"Origin": {origin}})
		if err == nil {
			_ = c.CloseNow()
			t.Errorf("Origin %q accepted", origin)
			continue
		}
		if resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("Origin %q: %v, want HTTP 403", origin, resp)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		var body struct{ Error, Message string }
		if json.Unmarshal(b, &body) != nil || body.Error != "forbidden" || body.Message == "" {
			t.Errorf("Origin %q: 403 body %q, want the JSON of a refused upgrade with error \"forbidden\"", origin, b)
		}
	}
	harness.Eventually(t, 5*time.Second, "no pod and no connection kept for refused origins", func() bool {
		m := harness.MetricsOf(t, g.URL)
		return m["mcpp_pods"] == 0 && m["mcpp_connections"] == 0
	})
	// Still serving.
	a := g.Dial(t, "sec-origin", "after", "")
	a.Send(map[string]any{"kind": "chat"})
}

// TestSecurityPublishCrossSite: POST /pods/NAME/envelopes takes JSON only
// (application/json, or newline-delimited JSON): a form post from a web
// page, or a post without a Content-Type, is 415 invalid_json; and a
// request from a foreign browser origin is 403 forbidden, as an upgrade
// is. A page therefore cannot publish into a developer's gateway in open
// mode. Nothing refused is relayed.
func TestSecurityPublishCrossSite(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	const pod = "sec-publish"
	watcher := g.Dial(t, pod, "watcher", "")
	post := func(contentType, origin, id string) (int, wire.Refusal) {
		t.Helper()
		u := g.URL + wire.PublishPath(pod) + "?participant=page"
		req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(`{"id":"`+id+`","kind":"chat","payload":{}}`))
		if err != nil {
			t.Fatal(err)
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var r wire.Refusal
		if resp.StatusCode != http.StatusOK && json.Unmarshal(b, &r) != nil {
			t.Errorf("%s from %q: HTTP %d with body %q, not a JSON refusal", contentType, origin, resp.StatusCode, b)
		}
		return resp.StatusCode, r
	}
	for i, ct := range []string{"", "text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded",
		"multipart/form-data; boundary=x", "application/javascript", "json"} {
		status, r := post(ct, "", fmt.Sprintf("ct-%d", i))
		if status != http.StatusUnsupportedMediaType || r.Code != wire.CodeInvalidJSON || !strings.Contains(r.Message, "application/json") {
			t.Errorf("Content-Type %q: HTTP %d %+v, want 415 invalid_json naming the types taken", ct, status, r)
		}
	}
	own := g.URL // the gateway's own origin
	for i, origin := range []string{"https://evil.example.net", "null", "http://localhost"} {
		status, r := post("application/json", origin, fmt.Sprintf("origin-%d", i))
		if status != http.StatusForbidden || r.Code != wire.CodeForbidden {
			t.Errorf("Origin %q: HTTP %d %+v, want 403 forbidden", origin, status, r)
		}
	}
	// JSON without an Origin (a tool), or from the gateway's own page, is
	// published.
	for i, tc := range []struct{ ct, origin string }{
		{"application/json", ""}, {"application/json; charset=utf-8", ""}, {"application/x-ndjson", ""}, {"application/json", own},
	} {
		id := fmt.Sprintf("ok-%d", i)
		if status, r := post(tc.ct, tc.origin, id); status != http.StatusOK {
			t.Fatalf("%s from %q: HTTP %d %+v", tc.ct, tc.origin, status, r)
		}
		if m := watcher.NextNonPresence(5 * time.Second); m == nil || m.Str("id") != id {
			t.Fatalf("the watcher got %v, want %s", m, id)
		}
	}
	watcher.ExpectNothing(300 * time.Millisecond)
}

// secRawRequest writes an HTTP request by hand (concurrently, since the
// gateway may answer before it has read it all) and returns the status of
// the answer.
func secRawRequest(t *testing.T, g *harness.Gateway, target string, headers string) int {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := "GET " + target + " HTTP/1.1\r\nHost: " + strings.TrimPrefix(g.URL, "http://") +
		"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" +
		headers + "\r\n"
	go func() { _, _ = conn.Write([]byte(req)) }()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("request of %d bytes: no answer: %v", len(req), err)
	}
	return resp.StatusCode
}

// TestSecurityHeaderLimits: an upgrade request whose query or headers are
// too large (1 MB, or just over the documented 32 KiB) gets an HTTP error
// (431), not an upgrade, and the gateway goes on serving; a request well
// under the limit is upgraded.
func TestSecurityHeaderLimits(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	big := strings.Repeat("a", 1<<20)
	cases := []struct {
		name    string
		target  string
		headers string
		want    int
	}{
		{"1 MB query", "/ws?pod=sec-big&participant=a&x=" + big, "", http.StatusRequestHeaderFieldsTooLarge},
		{"1 MB header", "/ws?pod=sec-big&participant=b", "X-Big: " + big + "\r\n", http.StatusRequestHeaderFieldsTooLarge},
		{"1 MB Authorization", "/ws?pod=sec-big&participant=c", "Authorization: Bearer " + big + "\r\n", http.StatusRequestHeaderFieldsTooLarge},
		{"1 MB token", "/ws?pod=sec-big&participant=d&token=" + big, "", http.StatusRequestHeaderFieldsTooLarge},
		{"40 KiB query", "/ws?pod=sec-big&participant=e&x=" + big[:40<<10], "", http.StatusRequestHeaderFieldsTooLarge},
		{"1,000 headers of 64 bytes", "/ws?pod=sec-big&participant=f", strings.Repeat("X-Many: "+big[:54]+"\r\n", 1000), http.StatusRequestHeaderFieldsTooLarge},
		{"16 KiB query", "/ws?pod=sec-big&participant=g&x=" + big[:16<<10], "", http.StatusSwitchingProtocols},
	}
	for _, tc := range cases {
		if got := secRawRequest(t, g, tc.target, tc.headers); got != tc.want {
			t.Errorf("%s: HTTP %d, want %d", tc.name, got, tc.want)
		}
	}
	harness.Eventually(t, 5*time.Second, "no pod and no connection left", func() bool {
		m := harness.MetricsOf(t, g.URL)
		return m["mcpp_pods"] == 0 && m["mcpp_connections"] == 0
	})
	c := g.Dial(t, "sec-big", "after", "")
	c.Send(map[string]any{"kind": "chat"})
}

// TestSecurityValidationBeforeAllocation: pod names, participant ids,
// filters, protocols and tokens are checked before anything is made for
// them: each refusal is counted, and no pod and no connection exist
// afterwards (mcpp_pods stays 0); a request to /ws that is no upgrade at
// all leaves nothing behind either.
func TestSecurityValidationBeforeAllocation(t *testing.T) {
	t.Parallel()
	open := harness.StartGateway(t, nil)
	tokens := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = secTokenFile(t, 0o600) })
	q := func(kv ...string) url.Values {
		v := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	cases := []struct {
		g      *harness.Gateway
		name   string
		query  url.Values
		header http.Header
		status int
		code   string
	}{
		{open, "empty pod", q("pod", "", "participant", "a"), nil, 400, "invalid_pod"},
		{open, "pod with a space", q("pod", "a b", "participant", "a"), nil, 400, "invalid_pod"},
		{open, "pod with a slash", q("pod", "a/b", "participant", "a"), nil, 400, "invalid_pod"},
		{open, "pod ..", q("pod", "../x", "participant", "a"), nil, 400, "invalid_pod"},
		{open, "pod of 65", q("pod", strings.Repeat("p", 65), "participant", "a"), nil, 400, "invalid_pod"},
		{open, "pod of 20,000", q("pod", strings.Repeat("p", 20000), "participant", "a"), nil, 400, "invalid_pod"},
		{open, "pod with NUL", q("pod", "a\x00b", "participant", "a"), nil, 400, "invalid_pod"},
		{open, "pod with newline", q("pod", "a\nb", "participant", "a"), nil, 400, "invalid_pod"},
		{open, "pod é", q("pod", "é", "participant", "a"), nil, 400, "invalid_pod"},
		{open, "pod with a NATS wildcard", q("pod", "a.*", "participant", "a"), nil, 400, "invalid_pod"},
		{open, "pod >", q("pod", ">", "participant", "a"), nil, 400, "invalid_pod"},
		{open, "bad topic alias", q("topic", "a b", "participant", "a"), nil, 400, "invalid_pod"},
		{open, "participant with a space", q("pod", "ok", "participant", "a b"), nil, 400, "invalid_participant"},
		{open, "participant of 129", q("pod", "ok", "participant", strings.Repeat("i", 129)), nil, 400, "invalid_participant"},
		{open, "empty participant", q("pod", "ok", "participant", ""), nil, 400, "invalid_participant"},
		{open, "participant system:gateway", q("pod", "ok", "participant", "system:gateway"), nil, 400, "invalid_participant"},
		{open, "participant system:x", q("pod", "ok", "participant", "system:x"), nil, 400, "invalid_participant"},
		{open, "participant é", q("pod", "ok", "participant", "é"), nil, 400, "invalid_participant"},
		{open, "participant with NUL", q("pod", "ok", "participant", "a\x00"), nil, 400, "invalid_participant"},
		{open, "bad filter", q("pod", "ok", "participant", "a", "contexts", "some"), nil, 400, "invalid_filter"},
		{open, "filter of 2,000 ids", q("pod", "ok", "participant", "a", "ids", strings.Repeat("x,", 2000)+"x"), nil, 400, "invalid_filter"},
		{open, "bad protocol", q("pod", "ok", "participant", "a", "protocol", "mcpp/v9"), nil, 400, "unsupported_protocol"},
		{tokens, "no token", q("pod", "sec-lab-1"), nil, 401, "unauthorized"},
		{tokens, "unknown token", q("pod", "sec-lab-1", "token", secBadQuery), nil, 401, "unauthorized"},
		{tokens, "forbidden pod", q("pod", "elsewhere"), harness.Bearer(secBot), 403, "forbidden"},
		{tokens, "bad pod with a good token", q("pod", "a b"), harness.Bearer(secAlice), 400, "invalid_pod"},
	}
	counts := map[*harness.Gateway]map[string]float64{open: {}, tokens: {}}
	for _, tc := range cases {
		status, code := harness.Refusal(t, tc.g.WS, tc.query, tc.header)
		if status != tc.status || code != tc.code {
			t.Errorf("%s: HTTP %d %q, want %d %q", tc.name, status, code, tc.status, tc.code)
		}
		counts[tc.g][tc.code]++
		if v := harness.Metric(t, tc.g.URL, "mcpp_pods"); v != 0 {
			t.Errorf("%s: mcpp_pods = %v after the refusal, want 0", tc.name, v)
		}
	}
	for g, byCode := range counts {
		m := harness.MetricsOf(t, g.URL)
		for code, n := range byCode {
			if got := m[fmt.Sprintf("mcpp_upgrade_refusals_total{code=%q}", code)]; got != n {
				t.Errorf("mcpp_upgrade_refusals_total{code=%q} = %v, want %v", code, got, n)
			}
		}
		if m["mcpp_connections"] != 0 || m["mcpp_pods"] != 0 {
			t.Errorf("after the refusals: %v connections, %v pods", m["mcpp_connections"], m["mcpp_pods"])
		}
	}
	// A plain GET of /ws (no upgrade) with a valid pod is answered with an
	// HTTP error and leaves no pod behind.
	resp, err := http.Get("http://" + strings.TrimPrefix(open.WS, "ws://") + "?pod=ok&participant=plain")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 400 {
		t.Errorf("a plain GET of /ws: HTTP %d, want an error", resp.StatusCode)
	}
	harness.Eventually(t, 5*time.Second, "no pod after a plain GET", func() bool {
		m := harness.MetricsOf(t, open.URL)
		return m["mcpp_pods"] == 0 && m["mcpp_connections"] == 0
	})
	// Both still serve.
	a := open.Dial(t, "ok", "a", "")
	a.Send(map[string]any{"kind": "chat"})
	b := tokens.DialToken(t, "sec-lab-2", secBot, true, "")
	b.Send(map[string]any{"kind": "chat"})
}
