package integration

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpp/gateway/audit"
	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/gateway/gatewaytest"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// The audit trail (issue 36, docs/protocol.md section 7): every trust
// decision the gateway makes is one JSON line in --audit-log, once, with
// its documented fields; and a trail that cannot be written never delays
// a delivery.

// auditEntries are the token file of TestAuditTrail: boss decides (it
// may call, grant, kick, and holds tool/* to grant it), agent proposes,
// the others chat; tools is the recipient of the proposed calls.
var auditEntries = []string{
	`{"token": "boss-t", "participant": "boss", "capabilities": ["chat", "tool/*", "mcp/request", "capability/grant", "gateway/kick"], "pods": ["*"]}`,
	`{"token": "agent-t", "participant": "agent", "capabilities": ["chat", "mcp/proposal"], "pods": ["*"]}`,
	`{"token": "bob-t", "participant": "bob", "capabilities": ["chat"], "pods": ["*"]}`,
	`{"token": "carol-t", "participant": "carol", "capabilities": ["chat"], "pods": ["*"]}`,
	`{"token": "clerk-t", "participant": "clerk", "capabilities": ["chat"], "pods": ["*"]}`,
	`{"token": "tools-t", "participant": "tools", "capabilities": ["mcp/response*"], "pods": ["*"]}`,
}

// writeTokens replaces the token file at path with entries, as an
// operator would: a new file renamed into place.
func writeTokens(t *testing.T, path string, entries []string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(`{"tokens": [`+strings.Join(entries, ",\n")+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// auditLines reads the trail at path once it holds at least n lines
// (the gateway writes it behind its decisions) and a moment more has
// added nothing, and returns them, each parsed.
func auditLines(t *testing.T, path string, n int) []map[string]any {
	t.Helper()
	var lines []map[string]any
	read := func() {
		lines = nil
		f, err := os.Open(path)
		if err != nil {
			return
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("a line of the audit trail is not a JSON object: %q", sc.Text())
			}
			lines = append(lines, m)
		}
	}
	harness.Eventually(t, 10*time.Second, fmt.Sprintf("%d lines in the audit trail", n), func() bool { read(); return len(lines) >= n })
	time.Sleep(300 * time.Millisecond) // nothing more is on its way
	read()
	return lines
}

// TestAuditTrail: the trust tests' decisions, made against a gateway
// process with --audit-log: joins over WebSocket, MCP and HTTP, a join
// refused for a bad token and one for a ban, a capability refused, a
// grant and its revoke, proposals approved once and always (with the
// grant that makes) and rejected, a kick with a ban, and a SIGHUP reload
// of the token file that disconnects someone. Each appears once, with
// the fields docs/protocol.md section 7 lists, and no token is written.
func TestAuditTrail(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokens, trail := filepath.Join(dir, "tokens.json"), filepath.Join(dir, "audit", "trail.log")
	if err := os.Mkdir(filepath.Dir(trail), 0o700); err != nil {
		t.Fatal(err)
	}
	writeTokens(t, tokens, auditEntries)
	proc := harness.StartGatewayProc(t, nil, "--listen", "127.0.0.1:0", "--tokens", tokens, "--audit-log", trail, "--history", "1000")
	g := proc.GW
	const pod = "audit-lab"

	boss := g.DialToken(t, pod, "boss-t", true, "")
	agent := g.DialToken(t, pod, "agent-t", true, "routing=directed")
	bob := g.DialToken(t, pod, "bob-t", false, "")
	tools := g.DialToken(t, pod, "tools-t", true, "routing=directed")
	boss.AwaitPresence("join", "tools", 5*time.Second)
	if status, _ := refusalOf(t, g, pod, "not-a-token"); status != http.StatusUnauthorized {
		t.Fatalf("a bad token: HTTP %d", status)
	}

	// A capability refused, then granted and revoked.
	bob.Send(map[string]any{"id": "b1", "kind": "tool/run"})
	bob.ExpectErr("capability_violation")
	if m := grant(t, boss, "g1", map[string]any{"recipient": "bob", "capabilities": []string{"tool/*"}, "reason": "for the build"}); m.Kind() != "system/capability" {
		t.Fatalf("the grant's answer: %v", m)
	}
	if m := request(t, boss, map[string]any{"id": "r1", "kind": "capability/revoke", "payload": map[string]any{"recipient": "bob", "grant_id": "g1"}}); m.Kind() != "system/capability" {
		t.Fatalf("the revoke's answer: %v", m)
	}

	// Proposals: approved once, approved always, rejected.
	digests := map[string]string{}
	for _, id := range []string{"p1", "p2", "p3"} {
		propose(t, agent, id, "echo")
		digests[id] = digestOf(t, proposalEvent(t, boss, id, "pending"))
	}
	once := request(t, boss, approval("a1", "p1", digests["p1"], ""))
	always := request(t, boss, approval("a2", "p2", digests["p2"], "always"))
	boss.Send(map[string]any{"id": "x3", "kind": "mcp/reject", "correlation_id": "p3", "payload": map[string]any{"reason": "not today"}})
	proposalEvent(t, agent, "p3", "rejected")

	// A kick with a ban; the banned participant is refused.
	if m := request(t, boss, map[string]any{"id": "k1", "kind": "gateway/kick", "payload": map[string]any{"participant": "bob", "reason": "flooding", "ban_ms": 60000}}); m.Kind() != "system/kick" {
		t.Fatalf("the kick's answer: %v", m)
	}
	bob.WaitClosed(5 * time.Second)
	if status, _ := harness.Refusal(t, g.WS, url.Values{"pod": {pod}}, harness.Bearer("bob-t")); status != http.StatusForbidden {
		t.Fatalf("bob, banned: HTTP %d", status)
	}

	// Joins over MCP and over HTTP.
	cs := harness.MCPConnect(t, g.URL, pod, "", harness.MCPOpts{Header: harness.Bearer("carol-t")})
	harness.MCPOK(t, cs, "pod_participants", map[string]any{})
	if status, body := post(t, g, pod, "clerk-t", map[string]any{"kind": "chat"}); status != http.StatusOK {
		t.Fatalf("clerk's publish: %d %s", status, body)
	}

	// The operator takes tools' token out and sends SIGHUP.
	writeTokens(t, tokens, auditEntries[:len(auditEntries)-1])
	if err := proc.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	tools.WaitClosed(5 * time.Second)

	lines := auditLines(t, trail, 21)
	raw, _ := os.ReadFile(trail)
	for _, tok := range []string{"boss-t", "agent-t", "bob-t", "carol-t", "clerk-t", "tools-t", "not-a-token"} {
		if strings.Contains(string(raw), `"`+tok+`"`) {
			t.Fatalf("the trail holds the token %s:\n%s", tok, raw)
		}
	}
	node := ""
	for _, l := range lines {
		ts, _ := l["ts"].(string)
		if _, err := time.Parse(time.RFC3339, ts); err != nil || len(ts) != len("2026-01-02T15:04:05.000Z") || !strings.HasSuffix(ts, "Z") {
			t.Errorf("ts %q is not RFC 3339 in UTC with milliseconds: %v", ts, l)
		}
		if node == "" {
			node, _ = l["node"].(string)
		}
		if l["node"] != node || node == "" {
			t.Errorf("node %v, want one node id on every line: %v", l["node"], l)
		}
		if l["decision"] != string(audit.TokensReloaded) && l["pod"] != pod {
			t.Errorf("pod %v: %v", l["pod"], l)
		}
	}

	hash := audit.TokenHash
	released, _ := once.Payload()["request"].(string)
	alwaysGrant, _ := always.Payload()["grant_id"].(string)
	wantJoin := func(who, token, transport string) map[string]any {
		return map[string]any{"decision": "join", "participant": who, "transport": transport, "auth": "token_file",
			"token_sha256": hash(token), "remote_addr": "*", "capabilities": "*"}
	}
	want := []map[string]any{
		wantJoin("boss", "boss-t", "ws"), wantJoin("agent", "agent-t", "ws"), wantJoin("bob", "bob-t", "ws"), wantJoin("tools", "tools-t", "ws"),
		wantJoin("carol", "carol-t", "mcp"), wantJoin("clerk", "clerk-t", "http_publish"),
		{"decision": "join_refused", "transport": "ws", "code": "unauthorized", "rule": "token", "token_sha256": hash("not-a-token"), "message": "*", "remote_addr": "*"},
		{"decision": "join_refused", "participant": "bob", "transport": "ws", "code": "forbidden", "rule": "banned", "auth": "token_file", "token_sha256": hash("bob-t"), "message": "*"},
		{"decision": "capability_refused", "participant": "bob", "transport": "ws", "kind": "tool/run", "envelope_id": "b1", "code": "capability_violation", "rule": "no_capability", "message": "*"},
		{"decision": "grant", "participant": "bob", "by": "boss", "grant_id": "g1", "envelope_id": "g1", "capabilities": []any{"tool/*"}, "reason": "for the build"},
		{"decision": "revoke", "participant": "bob", "by": "boss", "grant_id": "g1", "envelope_id": "r1", "capabilities": []any{"tool/*"}},
		{"decision": "proposal", "proposal": "p1", "participant": "agent", "to": "tools", "method": "tools/call", "tool": "echo", "digest": digests["p1"]},
		{"decision": "proposal", "proposal": "p2", "participant": "agent", "to": "tools", "method": "tools/call", "tool": "echo", "digest": digests["p2"]},
		{"decision": "proposal", "proposal": "p3", "participant": "agent", "to": "tools", "method": "tools/call", "tool": "echo", "digest": digests["p3"]},
		{"decision": "proposal_approved", "proposal": "p1", "participant": "agent", "by": "boss", "scope": "once", "digest": digests["p1"], "request": released},
		{"decision": "proposal_approved", "proposal": "p2", "participant": "agent", "by": "boss", "scope": "always", "digest": digests["p2"], "grant_id": alwaysGrant, "request": "*"},
		{"decision": "grant", "participant": "agent", "by": "boss", "grant_id": alwaysGrant, "to": "tools", "capabilities": "*", "reason": "approved always: proposal p2"},
		{"decision": "proposal_rejected", "proposal": "p3", "participant": "agent", "by": "boss", "reason": "not today", "digest": digests["p3"]},
		{"decision": "kick", "participant": "bob", "by": "boss", "reason": "flooding", "connections": float64(1), "envelope_id": "k1"},
		{"decision": "ban", "participant": "bob", "by": "boss", "reason": "flooding", "until": "*", "envelope_id": "k1"},
		{"decision": "tokens_reloaded", "trigger": "*",
			"removed":      []any{map[string]any{"participant": "tools", "token_sha256": hash("tools-t")}},
			"disconnected": []any{map[string]any{"pod": pod, "participant": "tools", "transport": "ws"}}},
	}
	if len(digests["p1"]) == 0 || released == "" || alwaysGrant == "" {
		t.Fatalf("the test's own answers: digests %v, released %q, grant %q", digests, released, alwaysGrant)
	}
	used := make([]bool, len(lines))
	for _, w := range want {
		var found []int
		for i, l := range lines {
			if matches(l, w) {
				found = append(found, i)
			}
		}
		if len(found) != 1 {
			t.Errorf("%d lines match %v, want 1", len(found), w)
			continue
		}
		used[found[0]] = true
	}
	for i, l := range lines {
		// A reload that changed nothing is not a decision twice: the
		// file watcher may read the new file a moment before the SIGHUP.
		if !used[i] && !(l["decision"] == "tokens_reloaded" && l["removed"] == nil && l["disconnected"] == nil) {
			t.Errorf("a line nobody asked for: %v", l)
		}
	}
	if t.Failed() {
		t.Logf("the trail:\n%s", raw)
	}
}

// matches reports whether line has every field of want: "*" is any value
// that is set; other values are compared as JSON.
func matches(line, want map[string]any) bool {
	for k, v := range want {
		got, ok := line[k]
		if !ok {
			return false
		}
		if v == "*" {
			continue
		}
		if !harness.JSONEqual(got, v) {
			return false
		}
	}
	return true
}

// TestAuditSinkNeverDelays: a trail that cannot be written, a named pipe
// that nobody reads (the gateway's writer waits forever in its open) and
// a full disk (/dev/full: every write fails with ENOSPC), never holds up
// delivery: 20,000 envelopes, every other one refused and recorded,
// arrive whole, the refusals too, while the lines the trail cannot take
// are dropped and counted in /metrics. A delivery that waited on the
// trail would never come: the pipe is never read.
func TestAuditSinkNeverDelays(t *testing.T) {
	t.Parallel()
	for _, sink := range []struct{ name, reason string }{{"pipe", "queue_full"}, {"full disk", "write_error"}} {
		t.Run(sink.name, func(t *testing.T) {
			t.Parallel()
			path := "/dev/full"
			if sink.name == "pipe" {
				path = filepath.Join(t.TempDir(), "audit.pipe")
				if err := syscall.Mkfifo(path, 0o600); err != nil {
					t.Fatal(err)
				}
			} else if _, err := os.Stat(path); err != nil {
				t.Fatalf("%s: %v (Linux has it)", path, err)
			}
			proc := harness.StartGatewayProc(t, nil, "--listen", "127.0.0.1:0", "--audit-log", path,
				"--default-capabilities", "chat", "--rate", "1000000", "--burst", "1000000")
			g := proc.GW
			const pod = "slow-trail"
			recv := g.DialBuffered(t, pod, "recv", "", 1<<15)
			send := g.DialBuffered(t, pod, "send", "", 1<<15)
			recv.AwaitPresence("join", "send", 5*time.Second)
			const n = 10000
			for i := range n {
				send.Send(map[string]any{"id": fmt.Sprintf("no-%d", i), "kind": "tool/run"}) // refused and recorded
				send.Send(map[string]any{"id": fmt.Sprintf("ok-%d", i), "kind": "chat"})
			}
			for i := range n {
				if m := recv.NextNonPresence(20 * time.Second); m == nil || m.Str("id") != fmt.Sprintf("ok-%d", i) {
					t.Fatalf("delivery %d: %v", i, m)
				}
				if m := send.Next(20 * time.Second); m == nil || m.ErrCode() != "capability_violation" || m.Str("correlation_id") != fmt.Sprintf("no-%d", i) {
					t.Fatalf("refusal %d: %v", i, m)
				}
			}
			series := `mcpp_audit_dropped_total{reason="` + sink.reason + `"}`
			harness.Eventually(t, 10*time.Second, series+" > 0", func() bool { return harness.MetricsOf(t, g.URL)[series] > 0 })
			m := harness.MetricsOf(t, g.URL)
			if m["mcpp_audit_lines_total"] != 0 {
				t.Fatalf("the trail wrote %v lines to a sink that takes none", m["mcpp_audit_lines_total"])
			}
			if sink.name == "full disk" && !strings.Contains(proc.Stderr.String(), "no space left on device") {
				t.Fatalf("the gateway did not log why the trail fails:\n%s", proc.Stderr)
			}
			t.Logf("%s: %v dropped (queue full), %v dropped (write error)", sink.name,
				m[`mcpp_audit_dropped_total{reason="queue_full"}`], m[`mcpp_audit_dropped_total{reason="write_error"}`])
		})
	}
}

// TestAuditTLSReload: a reload of the certificate is a line that names the
// certificate served before and the one served now (the SHA-256 of each
// leaf), and a reload whose files do not load says so, naming the
// certificate that stays.
func TestAuditTLSReload(t *testing.T) {
	t.Parallel()
	ca := gatewaytest.NewCA(t)
	certFile, keyFile := ca.Files(t, "127.0.0.1")
	trail := filepath.Join(t.TempDir(), "audit.log")
	g := harness.StartGateway(t, func(c *gateway.Config) { c.TLSCert, c.TLSKey, c.AuditLog = certFile, keyFile, trail })
	pemBytes, _ := os.ReadFile(certFile)
	block, _ := pem.Decode(pemBytes)
	old := sha256.Sum256(block.Bytes)
	fresh := ca.Issue(t, certFile, keyFile, "127.0.0.1")
	now := sha256.Sum256(fresh.Raw)
	if err := g.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := g.ReloadTLS(); err == nil {
		t.Fatal("a key file that does not load reloaded")
	}
	lines := auditLines(t, trail, 2)
	var moved, signalled, failed bool
	for _, l := range lines {
		if l["decision"] != "tls_reloaded" {
			t.Fatalf("a line that is no reload: %v", l)
		}
		if l["error"] == nil && l["previous_cert_sha256"] == hex.EncodeToString(old[:]) && l["cert_sha256"] == hex.EncodeToString(now[:]) &&
			l["subject"] == "CN=127.0.0.1" && l["not_after"] == fresh.NotAfter.UTC().Format("2006-01-02T15:04:05.000Z") {
			moved = true // by the SIGHUP, or by the watcher of the files a moment before it
		}
		if l["trigger"] == "sighup" && l["error"] == nil {
			signalled = true
		}
		if l["trigger"] == "sighup" && l["error"] != nil && l["cert_sha256"] == hex.EncodeToString(now[:]) {
			failed = true
		}
	}
	if !moved || !signalled || !failed {
		t.Fatalf("moved %v, signalled %v, failed %v in:\n%v", moved, signalled, failed, lines)
	}
}
