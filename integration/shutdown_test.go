package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/mcpp/gateway/integration/internal/harness"
	"github.com/mcpp/gateway/wire"
)

// TestShutdownSIGTERM runs the mcpp-gateway binary: on SIGTERM it stops
// answering /healthz with 200, delivers every envelope it accepted before
// (also to a participant that was not reading at the time), closes every
// connection with 1001 and exits 0.
func TestShutdownSIGTERM(t *testing.T) {
	t.Parallel()
	bin := harness.BuildCommand(t, "mcpp-gateway")
	addr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	stderr := &harness.SyncBuffer{}
	cmd := exec.Command(bin, "--listen", addr,
		"--rate", "100000", "--burst", "100000",
		"--send-queue", "4096", "--send-queue-bytes", "1GiB", "--write-timeout", "1m", "--shutdown-timeout", "30s")
	cmd.Env = harness.EnvWithoutMCPP()
	if harness.HistoryOff() {
		cmd.Env = append(cmd.Env, "MCPP_HISTORY=0")
	}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	ended := make(chan struct{})
	go func() { exited <- cmd.Wait(); close(ended) }()
	t.Cleanup(func() {
		select {
		case <-ended:
		default:
			_ = cmd.Process.Kill()
			select {
			case <-ended:
			case <-time.After(10 * time.Second):
				t.Errorf("gateway process did not end after SIGKILL")
			}
		}
		if t.Failed() {
			t.Logf("gateway log:\n%s", stderr.String())
		}
	})

	g := harness.GatewayAt(addr)
	harness.Eventually(t, 30*time.Second, "/healthz 200", func() bool {
		status, _, err := harness.HTTPGet(g.URL + "/healthz")
		return err == nil && status == http.StatusOK
	})

	const pod = "shutdown"
	const n = 1000
	alice := g.Dial(t, pod, "alice", "")
	carol := g.Dial(t, pod, "carol", "")
	// bob reads nothing until the shutdown has begun, so that much of
	// what he is owed is still queued in the gateway then.
	bconn, err := harness.DialConn(g.WS, url.Values{"pod": {pod}, "participant": {"bob"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	harness.PresenceOf(t, alice.Expect(), "join", "carol")
	harness.PresenceOf(t, alice.Expect(), "join", "bob")
	harness.PresenceOf(t, carol.Expect(), "join", "bob")

	filler := harness.Pad(4096)
	for i := 0; i < n; i++ {
		alice.Send(map[string]any{"id": fmt.Sprintf("sd-%d", i), "kind": "chat", "payload": map[string]any{"seq": i, "pad": filler}})
	}
	// Every envelope has been accepted (not necessarily delivered).
	harness.Eventually(t, 20*time.Second, "all envelopes accepted", func() bool {
		return harness.Metric(t, g.URL, "mcpp_envelopes_in_total") == n
	})

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 10*time.Second, "/healthz no longer 200", func() bool {
		status, _, err := harness.HTTPGet(g.URL + "/healthz")
		return err != nil || status != http.StatusOK
	})
	if c, err := harness.DialConn(g.WS, url.Values{"pod": {pod}, "participant": {"late"}}, nil); err == nil {
		_ = c.CloseNow()
		t.Fatal("a participant joined after SIGTERM")
	}

	bob := harness.StartClient(t, bconn, true)
	for _, c := range []*harness.Client{carol, bob} {
		for i := 0; i < n; i++ {
			m := c.NextOf()
			if harness.SeqOf(m) != i {
				t.Fatalf("%s: envelope %d is %v (seq %d)", c.ID, i, m.Str("id"), harness.SeqOf(m))
			}
		}
	}
	for _, c := range []*harness.Client{alice, carol, bob} {
		if code := c.WaitClosed(30 * time.Second); code != wire.CloseGoingAway {
			t.Fatalf("%s closed with %d, want 1001", c.ID, code)
		}
		// Nothing but presence may follow the last envelope.
		for len(c.In) > 0 {
			if m := <-c.In; m.Kind() != "system/presence" {
				t.Fatalf("%s: unexpected %v after the envelopes", c.ID, m)
			}
		}
	}

	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("gateway exited with %v, want status 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("gateway still running 30s after SIGTERM")
	}
	if log := stderr.String(); strings.Contains(log, "timed out") || strings.Contains(log, "dropped") {
		t.Fatalf("shutdown dropped connections:\n%s", log)
	}
}

// TestShutdownDuringUpgrades keeps participants connecting while the
// gateway shuts down. Each is refused (503 shutting_down, or the listener
// is gone) or welcomed and then closed with 1001, also one that joined
// after the shutdown had collected the members to close; Shutdown returns
// before its deadline, leaving no connection open.
func TestShutdownDuringUpgrades(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	const dialers = 8
	ended := make(chan websocket.StatusCode, 1<<16)
	var welcomed atomic.Int64
	after := make(chan struct{}) // closed 5 s after Shutdown returned
	stop := make(chan struct{})
	var dialing sync.WaitGroup
	for d := 0; d < dialers; d++ {
		dialing.Add(1)
		go func() {
			defer dialing.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				q := url.Values{"pod": {fmt.Sprintf("upgrades-%d", i%4)}, "participant": {fmt.Sprintf("d%d-%d", d, i)}}
				c, _, err := harness.DialWebSocket(g.WS, q, nil)
				if err != nil {
					continue // refused, or the listener is closed
				}
				welcomed.Add(1)
				go func() {
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					go func() { <-after; cancel() }()
					for {
						if _, _, err := c.Read(ctx); err != nil {
							ended <- websocket.CloseStatus(err) // -1: still open when the wait ended
							_ = c.CloseNow()
							return
						}
					}
				}()
			}
		}()
	}
	harness.Eventually(t, 10*time.Second, "20 participants connected", func() bool { return welcomed.Load() >= 20 })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	err := g.Shutdown(ctx)
	cancel()
	close(stop)
	dialing.Wait()
	if err != nil {
		t.Errorf("Shutdown: %v (it waited for a connection nobody closed)", err)
	}
	time.AfterFunc(5*time.Second, func() { close(after) })
	n := welcomed.Load()
	open := 0
	for i := int64(0); i < n; i++ {
		if code := <-ended; code != websocket.StatusGoingAway {
			open++
			if open == 1 {
				t.Errorf("a participant welcomed during the shutdown ended with %d, not 1001 (-1: its connection was still open 5 s after Shutdown returned)", code)
			}
		}
	}
	if open > 0 {
		t.Errorf("%d of %d participants were not closed with 1001", open, n)
	}
}
