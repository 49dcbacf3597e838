package harness

import (
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/gateway/gatewaytest"
	"github.com/mcpp/gateway/internal/wait"
)

// Gateway is a gateway served in process on a loopback port.
type Gateway struct {
	*gatewaytest.Server // URL (http://127.0.0.1:PORT), WS (ws://…/ws)
	Logs                *SyncBuffer
}

// HistoryOff reports whether MCPP_TEST_HISTORY=0 asks for every gateway a
// test starts to run with --history 0, unless the test chooses: .ci/run
// runs the integration tests once with history on (the default) and once
// with it off, which must behave as the gateway did before it had history.
func HistoryOff() bool { return os.Getenv("MCPP_TEST_HISTORY") == "0" }

// StartGateway starts a gateway with the defaults changed by edit; its
// log is shown when the test fails.
func StartGateway(t testing.TB, edit func(*gateway.Config)) *Gateway {
	t.Helper()
	return StartGatewayOn(t, gatewaytest.Listen(t), edit)
}

// StartGatewayOn is StartGateway on a listener the test opened first
// (gatewaytest.Listen), so that edit may name the gateway's address.
func StartGatewayOn(t testing.TB, ln net.Listener, edit func(*gateway.Config)) *Gateway {
	t.Helper()
	cfg := gatewaytest.Config()
	if HistoryOff() {
		cfg.History = 0
	}
	logs := &SyncBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if edit != nil {
		edit(&cfg)
	}
	s := gatewaytest.StartOn(t, ln, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the gateway's log:\n%s", logs)
		}
	})
	return &Gateway{Server: s, Logs: logs}
}

// SyncBuffer is a gateway's log, written by the gateway and read by the
// test.
type SyncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Eventually polls cond until it holds or d passes.
func Eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	wait.Until(t, d, what, cond)
}

// DialToken joins with a token given as a header (bearer=true) or in the
// query, with extra query parameters.
func (g *Gateway) DialToken(t *testing.T, pod, token string, header bool, extra string) *Client {
	t.Helper()
	q, err := url.ParseQuery(extra)
	if err != nil {
		t.Fatal(err)
	}
	q.Set("pod", pod)
	var h http.Header
	if header {
		h = Bearer(token)
	} else {
		q.Set("token", token)
	}
	c, err := DialConn(g.WS, q, h)
	if err != nil {
		t.Fatalf("dial %s with a token: %v", pod, err)
	}
	return StartClient(t, c, true)
}

// Bearer is the header that carries token.
func Bearer(token string) http.Header {
	return http.Header{"Authorization": {"Bearer " + token}}
}

// GatewayAt is a gateway that listens at addr (127.0.0.1:PORT) and that
// the test did not start in process: a process, or one already running.
func GatewayAt(addr string) *Gateway {
	return &Gateway{Server: &gatewaytest.Server{URL: "http://" + addr, WS: "ws://" + addr + "/ws"}}
}
