package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/gateway/gatewaytest"
	"github.com/mcpp/gateway/integration/internal/harness"
	"github.com/mcpp/gateway/wire"
)

// The gateway's TLS (--tls-cert, --tls-key): HTTPS and WSS only, TLS 1.2
// at least, the certificate rotated without a restart (SIGHUP or the
// files changing), the clients trusting a private CA, and the warning
// for tokens on a plain listener. Every certificate comes from a CA the
// test makes (gatewaytest.CA), for 127.0.0.1.

// tlsGateway starts a gateway in process serving TLS with a certificate
// of ca; its URL and WS are https:// and wss://.
func tlsGateway(t *testing.T, ca *gatewaytest.CA, edit func(*gateway.Config)) (g *harness.Gateway, certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = ca.Files(t, "127.0.0.1")
	g = harness.StartGateway(t, func(c *gateway.Config) {
		c.TLSCert, c.TLSKey = certFile, keyFile
		if edit != nil {
			edit(c)
		}
	})
	return g, certFile, keyFile
}

// servedSerial is the serial number of the certificate a new TLS
// connection to addr gets (the test's CA trusted).
func servedSerial(t *testing.T, ca *gatewaytest.CA, addr string) *big.Int {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, ca.ClientTLS())
	if err != nil {
		t.Fatalf("TLS handshake with %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

// hostOf is the host:port of a URL.
func hostOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// tlsDial joins pod as id over the gateway's wss:// URL, with conf, and
// does not reconnect: a connection lost ends the client, which a test
// that checks the connection stayed up needs.
func tlsDial(t *testing.T, wsURL, pod, id string, conf *tls.Config) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, wsURL, client.Options{Pod: pod, Participant: id, TLSConfig: conf, Reconnect: client.Reconnect{Disable: true}})
	if err != nil {
		t.Fatalf("dial %s as %s over TLS: %v", pod, id, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// tlsNextChat is the next chat message c receives (skipping the welcome
// and presence); anything else that ends or replaces the connection (a
// *client.Reconnected) fails the test.
func tlsNextChat(t *testing.T, c *client.Client) *client.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		ev, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for a chat: %v", err)
		}
		switch ev := ev.(type) {
		case *client.Message:
			if ev.Kind == "chat" {
				return ev
			}
		case *client.Reconnected:
			t.Fatalf("the connection was lost and made again (resumed %v): it should have stayed up", ev.Resumed)
		}
	}
}

func tlsChat(t *testing.T, c *client.Client, text string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	payload, _ := json.Marshal(map[string]string{"text": text})
	if _, err := c.Send(ctx, &wire.Envelope{Kind: "chat", Payload: payload}); err != nil {
		t.Fatalf("send %q: %v", text, err)
	}
}

func chatText(m *client.Message) string {
	var p struct{ Text string }
	_ = json.Unmarshal(m.Payload, &p)
	return p.Text
}

// TestTLSClientTrustsPrivateCA: the Go client joins over wss:// with the
// CA in Options.TLSConfig and talks; without it the gateway's certificate
// is refused (unknown authority), and plain ws:// or http:// on the same
// port gets nothing from the gateway: it serves TLS only.
func TestTLSClientTrustsPrivateCA(t *testing.T) {
	t.Parallel()
	ca := gatewaytest.NewCA(t)
	g, _, _ := tlsGateway(t, ca, nil)
	if !strings.HasPrefix(g.WS, "wss://") || !strings.HasPrefix(g.URL, "https://") {
		t.Fatalf("a TLS gateway's URLs: %s %s", g.URL, g.WS)
	}
	const pod = "tls-client"

	alice := tlsDial(t, g.WS, pod, "alice", ca.ClientTLS())
	bob := tlsDial(t, g.URL, pod, "bob", ca.ClientTLS()) // https:// means wss:// to Dial
	tlsChat(t, alice, "over TLS")
	if m := tlsNextChat(t, bob); chatText(m) != "over TLS" || m.From != "alice" {
		t.Fatalf("bob got %s from %s", m.Payload, m.From)
	}

	// Without the CA: Go's defaults (the system's roots) do not know it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := client.Dial(ctx, g.WS, client.Options{Pod: pod, Participant: "eve", Reconnect: client.Reconnect{Disable: true}})
	if !errors.As(err, new(x509.UnknownAuthorityError)) {
		t.Fatalf("dial without the CA: %v, want x509: certificate signed by unknown authority", err)
	}
	// Another CA's trust is no better.
	_, err = client.Dial(ctx, g.WS, client.Options{Pod: pod, Participant: "eve", TLSConfig: gatewaytest.NewCA(t).ClientTLS()})
	if !errors.As(err, new(x509.UnknownAuthorityError)) {
		t.Fatalf("dial trusting another CA: %v, want unknown authority", err)
	}
	// TLSConfig with an HTTPClient would be silently ignored: refused.
	_, err = client.Dial(ctx, g.WS, client.Options{Pod: pod, TLSConfig: ca.ClientTLS(), HTTPClient: &http.Client{}})
	if err == nil || !strings.Contains(err.Error(), "TLSConfig and HTTPClient") {
		t.Fatalf("dial with TLSConfig and HTTPClient: %v", err)
	}

	// No plain text on the TLS port: ws:// fails, http:// is answered by
	// Go's TLS server with a 400 that says so, not by the gateway.
	plainWS := strings.Replace(g.WS, "wss://", "ws://", 1)
	if _, err := client.Dial(ctx, plainWS, client.Options{Pod: pod, Participant: "eve", Reconnect: client.Reconnect{Disable: true}}); err == nil {
		t.Fatal("a plain ws:// dial to the TLS port was welcomed")
	}
	status, body, err := harness.HTTPGet(strings.Replace(g.URL, "https://", "http://", 1) + "/healthz")
	if err != nil || status != http.StatusBadRequest || !strings.Contains(body, "HTTPS") {
		t.Fatalf("plain http:// /healthz on the TLS port: %d %q %v, want 400 (an HTTP request to an HTTPS server)", status, body, err)
	}
}

// TestTLSPublishOverHTTPS: POST /pods/NAME/envelopes over https:// with
// the CA in PublishOptions.TLSConfig reaches a participant joined over
// wss://; without the CA the publish is refused before anything is sent.
func TestTLSPublishOverHTTPS(t *testing.T) {
	t.Parallel()
	ca := gatewaytest.NewCA(t)
	g, _, _ := tlsGateway(t, ca, nil)
	const pod = "tls-publish"
	alice := tlsDial(t, g.WS, pod, "alice", ca.ClientTLS())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	env := &wire.Envelope{Kind: "chat", Payload: json.RawMessage(`{"text":"posted over https"}`)}
	res, err := client.Publish(ctx, g.URL, client.PublishOptions{Pod: pod, Participant: "ci", TLSConfig: ca.ClientTLS()}, env)
	if err != nil || client.ResultError(res[0]) != nil {
		t.Fatalf("publish over https: %v %v", err, res)
	}
	if m := tlsNextChat(t, alice); chatText(m) != "posted over https" || m.From != "ci" {
		t.Fatalf("alice got %s from %s", m.Payload, m.From)
	}
	// The wss:// URL does too, and an HTTPClient with the CA in its
	// transport (what a program that publishes often gives).
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientTLS()}}
	if _, err := client.Ask(ctx, g.WS, client.PublishOptions{Pod: pod, Participant: "ci", HTTPClient: hc}, wire.RequestContexts, map[string]any{}); err != nil {
		t.Fatalf("ask over https with an HTTPClient trusting the CA: %v", err)
	}

	_, err = client.Publish(ctx, g.URL, client.PublishOptions{Pod: pod, Participant: "ci"},
		&wire.Envelope{Kind: "chat", Payload: json.RawMessage(`{"text":"never"}`)})
	if !errors.As(err, new(x509.UnknownAuthorityError)) {
		t.Fatalf("publish without the CA: %v, want unknown authority", err)
	}
}

// TestTLSVersionAtLeast12: a client that speaks TLS 1.1 at most gets no
// handshake; TLS 1.2 and 1.3 do.
func TestTLSVersionAtLeast12(t *testing.T) {
	t.Parallel()
	ca := gatewaytest.NewCA(t)
	g, _, _ := tlsGateway(t, ca, nil)
	addr := hostOf(t, g.URL)
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		conf := ca.ClientTLS()
		conf.MinVersion, conf.MaxVersion = v, v
		if conn, err := tls.Dial("tcp", addr, conf); err == nil {
			conn.Close()
			t.Fatalf("a %s handshake succeeded", tls.VersionName(v))
		}
	}
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		conf := ca.ClientTLS()
		conf.MinVersion, conf.MaxVersion = v, v
		conn, err := tls.Dial("tcp", addr, conf)
		if err != nil {
			t.Fatalf("a %s handshake: %v", tls.VersionName(v), err)
		}
		if got := conn.ConnectionState().Version; got != v {
			t.Errorf("asked for %s, got %s", tls.VersionName(v), tls.VersionName(got))
		}
		conn.Close()
	}
}

// TestTLSRotationOnFileChange: a new certificate written over the files
// is served to new connections within a few seconds, without a signal,
// while a client joined before keeps its connection and goes on talking;
// a certificate that does not load (a half-written file) keeps the one in
// force and is logged, and ReloadTLS says so too.
func TestTLSRotationOnFileChange(t *testing.T) {
	t.Parallel()
	ca := gatewaytest.NewCA(t)
	g, certFile, keyFile := tlsGateway(t, ca, nil)
	addr := hostOf(t, g.URL)
	const pod = "tls-rotate"
	before := servedSerial(t, ca, addr)
	alice := tlsDial(t, g.WS, pod, "alice", ca.ClientTLS())
	bob := tlsDial(t, g.WS, pod, "bob", ca.ClientTLS())

	next := ca.Issue(t, certFile, keyFile, "127.0.0.1")
	if next.SerialNumber.Cmp(before) == 0 {
		t.Fatal("the new certificate has the old serial")
	}
	harness.Eventually(t, 15*time.Second, "the new certificate served", func() bool {
		return servedSerial(t, ca, addr).Cmp(next.SerialNumber) == 0
	})
	if !strings.Contains(g.Logs.String(), "TLS certificate reloaded: its files changed") {
		t.Errorf("no log of the reload:\n%s", g.Logs)
	}
	// The connections made before are the same ones, and work.
	tlsChat(t, alice, "after the rotation")
	if m := tlsNextChat(t, bob); chatText(m) != "after the rotation" {
		t.Fatalf("bob got %s", m.Payload)
	}
	carol := tlsDial(t, g.WS, pod, "carol", ca.ClientTLS())
	tlsChat(t, carol, "joined after")
	if m := tlsNextChat(t, alice); chatText(m) != "joined after" {
		t.Fatalf("alice got %s", m.Payload)
	}

	// A broken certificate file: the one in force stays, an error is
	// logged (by the watcher, and by ReloadTLS, which returns it).
	const notLoaded = "the TLS certificate does not load; the previous one stays in force"
	errors0 := strings.Count(g.Logs.String(), notLoaded)
	if err := os.WriteFile(certFile, []byte("-----BEGIN CERTIFICATE-----\nbroken\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 15*time.Second, "the watcher's error", func() bool {
		return strings.Count(g.Logs.String(), notLoaded) > errors0
	})
	if got := servedSerial(t, ca, addr); got.Cmp(next.SerialNumber) != 0 {
		t.Fatalf("after a broken file the gateway serves serial %v, want the one in force, %v", got, next.SerialNumber)
	}
	errors1 := strings.Count(g.Logs.String(), notLoaded)
	if err := g.ReloadTLS(); err == nil || !strings.Contains(err.Error(), "--tls-cert") {
		t.Fatalf("ReloadTLS of a broken file: %v, want an error naming --tls-cert", err)
	}
	if strings.Count(g.Logs.String(), notLoaded) <= errors1 {
		t.Errorf("ReloadTLS's failure is not logged:\n%s", g.Logs)
	}
	if got := servedSerial(t, ca, addr); got.Cmp(next.SerialNumber) != 0 {
		t.Fatalf("after a broken file the gateway serves serial %v, want the one in force, %v", got, next.SerialNumber)
	}
	// Mended, it is taken again.
	third := ca.Issue(t, certFile, keyFile, "127.0.0.1")
	harness.Eventually(t, 15*time.Second, "the mended certificate served", func() bool {
		return servedSerial(t, ca, addr).Cmp(third.SerialNumber) == 0
	})
	tlsChat(t, bob, "still here")
	if m := tlsNextChat(t, alice); chatText(m) != "still here" {
		t.Fatalf("alice got %s", m.Payload)
	}
}

// TestTLSRotationOnSIGHUP: mcpp-gateway, run as an operator runs it, reads
// the certificate again on SIGHUP (the log says so: the watcher's line is
// another), new connections get it, and a client joined before is still
// connected.
func TestTLSRotationOnSIGHUP(t *testing.T) {
	t.Parallel()
	ca := gatewaytest.NewCA(t)
	certFile, keyFile := ca.Files(t, "127.0.0.1")
	p := harness.StartGatewayProc(t, nil, "--listen", "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile)
	addr := hostOf(t, p.GW.URL)
	wsURL := "wss://" + addr + "/ws"
	if !strings.Contains(p.Stderr.String(), "wss://"+addr+"/ws") {
		t.Errorf("the start log does not give the wss:// URL:\n%s", p.Stderr)
	}
	const pod = "tls-sighup"
	alice := tlsDial(t, wsURL, pod, "alice", ca.ClientTLS())
	bob := tlsDial(t, wsURL, pod, "bob", ca.ClientTLS())

	next := ca.Issue(t, certFile, keyFile, "127.0.0.1")
	if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 10*time.Second, "the SIGHUP's reload in the log", func() bool {
		return strings.Contains(p.Stderr.String(), `msg="TLS certificate reloaded"`)
	})
	if got := servedSerial(t, ca, addr); got.Cmp(next.SerialNumber) != 0 {
		t.Fatalf("after SIGHUP the gateway serves serial %v, want the new %v", got, next.SerialNumber)
	}
	tlsChat(t, alice, "after SIGHUP")
	if m := tlsNextChat(t, bob); chatText(m) != "after SIGHUP" {
		t.Fatalf("bob got %s", m.Payload)
	}
}

// TestTLSBadCertificateAtStart: a certificate that does not load stops
// the gateway at start, with an error that names the flag, in process and
// as a command (exit status 1).
func TestTLSBadCertificateAtStart(t *testing.T) {
	t.Parallel()
	ca := gatewaytest.NewCA(t)
	certFile, keyFile := ca.Files(t, "127.0.0.1")
	_, otherKey := gatewaytest.NewCA(t).Files(t, "127.0.0.1")
	garbage := harness.WriteFile(t, "cert.pem", "not a certificate\n")
	for name, files := range map[string][2]string{
		"not PEM":             {garbage, keyFile},
		"a key of another":    {certFile, otherKey},
		"a missing file":      {certFile + ".gone", keyFile},
		"the key as the cert": {keyFile, keyFile},
	} {
		cfg := gatewaytest.Config()
		cfg.TLSCert, cfg.TLSKey = files[0], files[1]
		g, err := gateway.New(cfg)
		if err == nil {
			_ = g.Shutdown(context.Background())
			t.Errorf("%s: the gateway started", name)
			continue
		}
		if !strings.Contains(err.Error(), "--tls-cert") {
			t.Errorf("%s: %v does not name --tls-cert", name, err)
		}
	}
	_, err := harness.TryStartGatewayProc(t, nil, "--listen", "127.0.0.1:0", "--tls-cert", garbage, "--tls-key", keyFile)
	if err == nil || !strings.Contains(err.Error(), "--tls-cert") || !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("mcpp-gateway with a bad certificate: %v", err)
	}
}

// TestPlainListenerWithTokensWarns: tokens required and a plain listener
// on an address that is not loopback (0.0.0.0, every interface) is one
// warning at start; loopback, TLS, or no tokens are none.
func TestPlainListenerWithTokensWarns(t *testing.T) {
	t.Parallel()
	tokens := harness.WriteFile(t, "tokens.json", `{"tokens": [{"token": "alice-secret", "participant": "alice", "capabilities": ["chat"], "pods": ["*"]}]}`)
	ca := gatewaytest.NewCA(t)
	certFile, keyFile := ca.Files(t, "127.0.0.1")
	const warning = "tokens are required and travel in the clear"
	for _, tc := range []struct {
		name, listen string
		tokens, tls  bool
		warn         bool
	}{
		{"tokens, plain, every interface", "0.0.0.0:0", true, false, true},
		{"tokens, plain, loopback", "127.0.0.1:0", true, false, false},
		{"tokens, TLS, every interface", "0.0.0.0:0", true, true, false},
		{"open, plain, every interface", "0.0.0.0:0", false, false, false},
	} {
		logs := &harness.SyncBuffer{}
		cfg := gatewaytest.Config()
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
		if tc.tokens {
			cfg.Tokens = tokens
		}
		if tc.tls {
			cfg.TLSCert, cfg.TLSKey = certFile, keyFile
		}
		ln, err := net.Listen("tcp", tc.listen)
		if err != nil {
			t.Fatal(err)
		}
		g, err := gateway.New(cfg)
		if err != nil {
			ln.Close()
			t.Fatalf("%s: %v", tc.name, err)
		}
		served := make(chan error, 1)
		go func() { served <- g.Serve(ln) }()
		// Serve logs before it accepts: a request answered means it has.
		scheme, conf := "http", (*tls.Config)(nil)
		if tc.tls {
			scheme, conf = "https", ca.ClientTLS()
		}
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: conf}}
		port := ln.Addr().(*net.TCPAddr).Port
		resp, err := hc.Get(fmt.Sprintf("%s://127.0.0.1:%d/healthz", scheme, port))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = g.Shutdown(ctx)
		cancel()
		<-served
		if err != nil {
			t.Fatalf("%s: /healthz: %v", tc.name, err)
		}
		if n := strings.Count(logs.String(), warning); n != map[bool]int{true: 1, false: 0}[tc.warn] {
			t.Errorf("%s: the warning logged %d times, want it %v:\n%s", tc.name, n, tc.warn, logs)
		}
	}
}

// TestTLSMCPOverHTTPS: /mcp is served by the same TLS listener: the MCP
// SDK's client, with an http.Client trusting the CA, initializes a session
// and calls a tool; without the CA it cannot connect.
func TestTLSMCPOverHTTPS(t *testing.T) {
	t.Parallel()
	ca := gatewaytest.NewCA(t)
	g, _, _ := tlsGateway(t, ca, func(c *gateway.Config) { c.History = 1000 }) // /mcp reads the history
	endpoint := g.URL + "/mcp?pod=tls-mcp&participant=agent"
	connect := func(hc *http.Client) (*mcp.ClientSession, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c := mcp.NewClient(&mcp.Implementation{Name: "mcpp-tls-test", Version: "1"}, nil)
		return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, MaxRetries: -1}, nil)
	}
	cs, err := connect(&http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientTLS()}})
	if err != nil {
		t.Fatalf("MCP over https: %v", err)
	}
	defer cs.Close()
	if init := cs.InitializeResult(); init == nil || init.ServerInfo == nil {
		t.Fatalf("no initialize result: %+v", init)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) == 0 {
		t.Fatalf("tools/list over https: %v %v", tools, err)
	}

	if cs, err := connect(&http.Client{}); err == nil {
		cs.Close()
		t.Fatal("an MCP client without the CA connected")
	} else if !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("MCP without the CA: %v, want unknown authority", err)
	}
}
