package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpp/gateway/gateway/gatewaytest"
	"github.com/mcpp/gateway/wire"
)

// The operator's API on an open gateway (docs/protocol.md section 7)
// answers only a request from this machine to a loopback address: its
// port may be reachable from elsewhere, and a web page may make a
// visitor's browser ask a name it rebinds to 127.0.0.1.
func TestAdminOpenModeLoopbackOnly(t *testing.T) {
	s := gatewaytest.Start(t, gatewaytest.Config())

	// From here, to 127.0.0.1: answered.
	resp, err := http.Get(s.URL + wire.PathAdminPods)
	if err != nil {
		t.Fatal(err)
	}
	var pods wire.AdminPods
	if err := json.NewDecoder(resp.Body).Decode(&pods); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a loopback request on an open gateway: %d %v", resp.StatusCode, err)
	}
	_ = resp.Body.Close()
	if len(pods.Nodes) != 1 || !pods.Nodes[0].Answered || !pods.Complete {
		t.Fatalf("the answer's nodes: %+v", pods)
	}

	refused := func(what string, status int, body string) {
		t.Helper()
		var r wire.Refusal
		if err := json.Unmarshal([]byte(body), &r); err != nil || status != http.StatusForbidden || r.Code != wire.CodeForbidden {
			t.Errorf("%s: %d %s; want 403 forbidden", what, status, body)
		}
	}
	// A rebound name: the request comes from this machine, but its Host
	// is the attacker's page's.
	for _, host := range []string{"evil.example", "evil.example:80", "127.0.0.1.evil.example", "10.0.0.1"} {
		req, _ := http.NewRequest(http.MethodGet, s.URL+wire.PathAdminPods, nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		refused("Host "+host, resp.StatusCode, string(b))
	}
	// A page of another origin, even on a loopback Host.
	req, _ := http.NewRequest(http.MethodPost, s.URL+wire.PathAdminDrain, strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", "http://evil.example")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	refused("a foreign Origin", resp.StatusCode, string(b))

	// From another machine (a remote address that is not loopback), to a
	// loopback Host or to the gateway's own: refused, every endpoint.
	h := s.Handler()
	for _, c := range []struct{ method, path, host string }{
		{http.MethodGet, wire.PathAdminPods, "127.0.0.1:8080"},
		{http.MethodGet, wire.PathAdminPods + "/lab", "gw.example:8080"},
		{http.MethodPost, wire.PathAdminKick, "127.0.0.1:8080"},
		{http.MethodPost, wire.PathAdminRevoke, "localhost"},
		{http.MethodPost, wire.PathAdminDrain, "[::1]:8080"},
	} {
		req := httptest.NewRequest(c.method, c.path, strings.NewReader(`{"participant":"x","pod":"lab","grant_id":"g"}`))
		req.Header.Set("Content-Type", "application/json")
		req.RemoteAddr = "192.0.2.7:40000"
		req.Host = c.host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		refused(c.method+" "+c.path+" from 192.0.2.7", rec.Code, rec.Body.String())
	}
	if s.Draining() {
		t.Fatal("a refused drain drained the node")
	}
}

// gateway/admin is never a default: with it in --default-capabilities,
// every JWT without a caps claim (every participant, in open mode) would
// operate every pod of its own.
func TestAdminNeverADefault(t *testing.T) {
	for _, v := range []string{"gateway/admin", "chat,gateway/admin", `[{"kind": "gateway/admin", "payload": {}}]`} {
		cfg := gatewaytest.Config()
		cfg.DefaultCapabilities = v
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "--default-capabilities") || !strings.Contains(err.Error(), "gateway/admin is never a default") {
			t.Errorf("--default-capabilities %s: %v", v, err)
		}
	}
	// A wildcard does not give it, so it stays allowed.
	for _, v := range []string{"*", "gateway/*", `[{"kind": "gateway/admin", "payload": {"x": 1}}]`} {
		cfg := gatewaytest.Config()
		cfg.DefaultCapabilities = v
		if err := cfg.Validate(); err != nil {
			t.Errorf("--default-capabilities %s: %v", v, err)
		}
	}
}
