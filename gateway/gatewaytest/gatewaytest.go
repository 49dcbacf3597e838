// Package gatewaytest serves a real gateway in process on a loopback port
// for the tests of the packages around it (the client, the bench, the
// integration tests), as net/http/httptest serves a handler: the whole
// gateway, with its embedded NATS server and JetStream, nothing mocked.
//
//	cfg := gatewaytest.Config()
//	cfg.History = 100
//	srv := gatewaytest.Start(t, cfg) // shut down when the test ends
//	c, err := client.Dial(ctx, srv.WS, client.Options{Pod: "lab"})
package gatewaytest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
)

// Server is a gateway serving on 127.0.0.1. With Config's TLSCert and
// TLSKey (see CA) it serves TLS, and its URLs are https:// and wss://.
type Server struct {
	*gateway.Gateway
	URL string // http://127.0.0.1:PORT (https:// with TLS)
	WS  string // ws://127.0.0.1:PORT/ws (wss:// with TLS)
}

// Config is gateway.DefaultConfig as a test wants it: no pings (a test
// that pauses a reader decides itself when the reader is cut) and no log.
func Config() gateway.Config {
	cfg := gateway.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.PingInterval = 0
	cfg.Logger = slog.New(slog.DiscardHandler)
	return cfg
}

// Start serves a gateway with cfg until the test ends, then shuts it
// down (giving it 5 s). A gateway that cannot start fails the test.
func Start(tb testing.TB, cfg gateway.Config) *Server {
	tb.Helper()
	s, stop, err := Serve(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
	return s
}

// StartOn is Start on a listener the test opened first (Listen), for a
// configuration that names the gateway's own address (its
// --oauth-resource). The listener is closed with the gateway, or when it
// cannot start.
func StartOn(tb testing.TB, ln net.Listener, cfg gateway.Config) *Server {
	tb.Helper()
	s, stop, err := ServeOn(ln, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
	return s
}

// Listen opens a listener on a loopback port for StartOn; its address is
// the gateway's, http://ADDR.
func Listen(tb testing.TB) net.Listener {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	return ln
}

// Serve is Start for a TestMain, which has no test to clean up after:
// stop shuts the gateway down.
func Serve(cfg gateway.Config) (s *Server, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	return ServeOn(ln, cfg)
}

// ServeOn is Serve on a listener of the caller's.
func ServeOn(ln net.Listener, cfg gateway.Config) (s *Server, stop func(), err error) {
	g, err := gateway.New(cfg)
	if err != nil {
		_ = ln.Close()
		return nil, nil, fmt.Errorf("gateway.New: %w", err)
	}
	go func() { _ = g.Serve(ln) }()
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
	}
	addr := ln.Addr().String()
	if cfg.TLSCert != "" {
		return &Server{Gateway: g, URL: "https://" + addr, WS: "wss://" + addr + "/ws"}, stop, nil
	}
	return &Server{Gateway: g, URL: "http://" + addr, WS: "ws://" + addr + "/ws"}, stop, nil
}
