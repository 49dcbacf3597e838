package integration

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
	"github.com/mcpp/gateway/wire"
)

// Issue 37: mcpp admin speaks the operator's API, with --token and
// --gateway as the other commands: it lists pods and one pod, revokes,
// kicks and drains, and says what the gateway refused.
func TestCLIAdmin(t *testing.T) {
	t.Parallel()
	bin := harness.BuildCommand(t, "mcpp")
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.Tokens = harness.WriteFile(t, "tokens.json", adminTokens)
	})
	gw := cliGateway(g)
	bob := g.DialToken(t, "cli-lab", "bob-t", true, "")
	mod := g.DialToken(t, "cli-lab", "mod-t", true, "")
	mod.Send(map[string]any{"id": "g-cli", "kind": "capability/grant", "payload": map[string]any{"recipient": "bob", "capabilities": []string{"tool/*"}}})
	awaitEnvelope(t, bob, "capability/grant", "g-cli")

	admin := func(args ...string) cliResult {
		t.Helper()
		return runCLI(t, bin, "", append([]string{"admin"}, append(args, "--gateway", gw)...)...)
	}
	r := admin("pods", "--token", "ops-t")
	if r.code != 0 || !strings.Contains(r.stdout, "POD") || !strings.Contains(r.stdout, "cli-lab") {
		t.Fatalf("mcpp admin pods: %d %q %q", r.code, r.stdout, r.stderr)
	}
	fields := strings.Fields(strings.Split(strings.TrimSpace(r.stdout), "\n")[1])
	// POD NODES MEMBERS OBSERVERS CONTEXTS PROPOSALS GRANTS BANS
	if len(fields) != 8 || fields[0] != "cli-lab" || fields[2] != "2" || fields[6] != "1" {
		t.Fatalf("mcpp admin pods' row: %q", fields)
	}
	r = admin("pods", "--token", "ops-t", "--json", "--cluster")
	var ans wire.AdminPods
	if err := json.Unmarshal([]byte(r.stdout), &ans); r.code != 0 || err != nil || len(ans.Pods) != 1 {
		t.Fatalf("mcpp admin pods --json: %d %v %q", r.code, err, r.stdout)
	}
	r = admin("pod", "cli-lab", "--token", "ops-t")
	for _, want := range []string{"pod cli-lab", "MEMBER", "bob", "mod", "GRANT", "g-cli", `["tool/*"]`} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Fatalf("mcpp admin pod cli-lab lacks %q: %d %q %q", want, r.code, r.stdout, r.stderr)
		}
	}
	r = admin("revoke", "g-cli", "--pod", "cli-lab", "--token", "ops-t", "--reason", "done")
	if r.code != 0 || !strings.Contains(r.stdout, "revoked grant g-cli of bob in pod cli-lab (granted by mod") {
		t.Fatalf("mcpp admin revoke: %d %q %q", r.code, r.stdout, r.stderr)
	}
	awaitEnvelope(t, bob, "capability/revoke", "")
	r = admin("kick", "bob", "--token", "ops-t", "--reason", "bye", "--ban", "1m")
	if r.code != 0 || !strings.Contains(r.stdout, "kicked bob from cli-lab (1 connection), banned until ") {
		t.Fatalf("mcpp admin kick: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if code := bob.WaitClosed(5 * time.Second); code != wire.CloseKicked {
		t.Fatalf("bob after mcpp admin kick: %d", code)
	}

	// Refusals: said, exit 1; a wrong command line, exit 2.
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"pods"}, "HTTP 401 unauthorized"},
		{[]string{"pods", "--token", "mod-t"}, "HTTP 403 forbidden"},
		{[]string{"drain", "--token", "bob-t"}, "HTTP 403 forbidden"},
		{[]string{"pod", "cli-none", "--token", "ops-t"}, "HTTP 404 not_found"},
		{[]string{"revoke", "g-cli", "--pod", "cli-lab", "--token", "ops-t"}, "HTTP 404 not_found"},
	} {
		if r := admin(c.args...); r.code != 1 || !strings.Contains(r.stderr, c.says) {
			t.Errorf("mcpp admin %v: %d %q; want 1 and %q", c.args, r.code, r.stderr, c.says)
		}
	}
	for _, args := range [][]string{{}, {"frob"}, {"pod"}, {"pod", "a", "b"}, {"revoke", "g1"}, {"kick", "bob", "--ban", "9999h"}, {"pods", "--limit", "5000"}} {
		if r := admin(args...); r.code != 2 || r.stderr == "" {
			t.Errorf("mcpp admin %v: %d %q; want 2 and a message", args, r.code, r.stderr)
		}
	}
	if g.Draining() {
		t.Fatal("a refused drain drained the node")
	}
	r = admin("drain", "--token", "ops-t")
	if r.code != 0 || !strings.Contains(r.stdout, "drained: 1 connection closed with 1001") {
		t.Fatalf("mcpp admin drain: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if code := mod.WaitClosed(5 * time.Second); code != wire.CloseGoingAway {
		t.Fatalf("mod after mcpp admin drain: %d", code)
	}
}
