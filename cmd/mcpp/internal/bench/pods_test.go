package bench

import (
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary stand for mcpp where bench starts its
// hidden nats-server (`mcpp _nats`) in a process of its own.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "_nats" {
		os.Exit(NATSMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// buildGateway builds mcpp-gateway for bench to start, as a user would
// have it next to mcpp.
func buildGateway(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mcpp-gateway")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/mcpp/gateway/cmd/mcpp-gateway")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build mcpp-gateway: %v\n%s", err, out)
	}
	return bin
}

// TestPodsOnEveryServer runs `mcpp bench --pods` at a small size on the
// gateway, the gateway with --history 0 and nats-server, each a process
// of its own, and checks what a user reads in its report: every server
// there, every join admitted, nothing lost, and each server's
// collections in the window counted from its gctrace.
func TestPodsOnEveryServer(t *testing.T) {
	bin := buildGateway(t)
	// Servers that collect at every 1% of heap allocated (the children
	// inherit GOGC), so that a window of seconds holds collections: the
	// gateway's history allocates enough for a dozen at this load,
	// nats-server so little that it may not collect there at all.
	t.Setenv("GOGC", "1")
	var stdout, stderr strings.Builder
	args := []string{"--pods", "20", "--pod-rate", "50", "--duration", "2s", "--versus", "--history 0", "--peer", "nats",
		"--gateway-bin", bin, "--json"}
	if code := Run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("Run(%q) = %d: %s", args, code, stderr.String())
	}
	var got podsJSON
	if err := json.Unmarshal([]byte(stdout.String()), &got); err != nil {
		t.Fatalf("--json printed no JSON object: %v\n%s", err, stdout.String())
	}
	want := []string{"gateway", "gateway --history 0", "nats"}
	if strings.Join(got.Servers, ",") != strings.Join(want, ",") || len(got.Runs) != 3 || len(got.Medians) != 3 {
		t.Fatalf("servers %q, %d runs, %d medians; want %q, one run each", got.Servers, len(got.Runs), len(got.Medians), want)
	}
	for i, r := range got.Runs {
		if r.Server != want[i] || r.Round != 1 {
			t.Errorf("run %d is %s round %d, want %s round 1", i, r.Server, r.Round, want[i])
		}
		if r.Joins != 60 || r.Admitted != 60 {
			t.Errorf("%s: %d of %d joins admitted, want 60 of 60 (%v %s)", r.Server, r.Admitted, r.Joins, r.Refusals, r.FirstError)
		}
		if r.Sent == 0 || r.Expected != 2*r.Sent || r.Received != r.Expected || r.Lost != 0 || r.Twice != 0 || r.OutOfOrder != 0 || r.Cut != 0 {
			t.Errorf("%s: %d sent, %d expected, %d received, %d lost, %d twice, %d out of order, %d cut",
				r.Server, r.Sent, r.Expected, r.Received, r.Lost, r.Twice, r.OutOfOrder, r.Cut)
		}
		if r.P50Ms <= 0 || r.P99Ms < r.P50Ms || r.MaxMs < r.P99Ms {
			t.Errorf("%s: latency p50 %v p99 %v max %v ms", r.Server, r.P50Ms, r.P99Ms, r.MaxMs)
		}
		if r.RSSBeforeMiB <= 0 || r.Delivered <= 0 || r.CPUADeliveryUs <= 0 {
			t.Errorf("%s: RSS %v MiB before, %d deliveries in the window, %v µs CPU a delivery", r.Server, r.RSSBeforeMiB, r.Delivered, r.CPUADeliveryUs)
		}
		// Every server collects as it starts: its trace was read.
		if g := r.GC; g == nil || g.InLife < 1 || g.InLife < g.Collections || g.MarkWallMaxMs > g.MarkWallSumMs || g.AssistCPUMaxMs > g.AssistCPUSumMs {
			t.Errorf("%s: the server's collections were not counted: %+v", r.Server, g)
		} else if r.Server == "gateway" && (g.Collections < 1 || g.MarkWallSumMs <= 0) {
			t.Errorf("%s: no collection counted in the window: %+v", r.Server, g)
		}
		if !r.Client.CollectorOff {
			t.Errorf("%s: the bench client's collector was not off in the window", r.Server)
		}
	}
	// The text of the same runs: every server side by side.
	rep := &podsReport{plan: podsPlan{rounds: 1, servers: podsServers([][]string{{"--history", "0"}}, true)}, runs: got.Runs}
	table := rep.table()
	for _, line := range []string{"gateway ", "gateway --history 0 ", "nats ", "gateway/nats ", "server GCs"} {
		if !strings.Contains(table, line) {
			t.Errorf("the table lacks %q:\n%s", line, table)
		}
	}
}

func TestParseGCLine(t *testing.T) {
	for _, c := range []struct {
		line                string
		ok                  bool
		wall, stops, assist time.Duration
		live                int
	}{
		{line: "gc 12 @3.456s 2%: 0.026+390+0.10 ms clock, 0.21+245/120/0+0.82 ms cpu, 110->115->98 MB, 120 MB goal, 41 MB stacks, 0 MB globals, 2 P\n",
			ok: true, wall: 390126 * time.Microsecond, stops: 126 * time.Microsecond, assist: 245 * time.Millisecond, live: 98},
		{line: "gc 3 @0.100s 1%: 1+2+3 ms clock, 1+0.5/1/0+3 ms cpu, 4->4->1 MB, 5 MB goal, 0 MB stacks, 0 MB globals, 2 P (forced)\n",
			ok: true, wall: 6 * time.Millisecond, stops: 4 * time.Millisecond, assist: 500 * time.Microsecond, live: 1},
		{line: "gc 4 @1.000s 1% (checking for goroutine leaks): 1+1+1 ms clock, 0+0/0/0+0 ms cpu, 1->1->1 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P\n",
			ok: true, wall: 3 * time.Millisecond, stops: 2 * time.Millisecond, live: 1},
		{line: "gateway: listening on 127.0.0.1:8080\n"},
		{line: "gc 5 @1.000s 1%: 1+x+1 ms clock, 0+0/0/0+0 ms cpu, 1->1->1 MB\n"},
		{line: "gc 6 @1.000s 1%: 1+1+1 ms clock\n"},
	} {
		g, ok := parseGCLine(c.line)
		if ok != c.ok || g.Wall != c.wall || g.Stops != c.stops || g.Assist != c.assist || g.LiveMB != c.live {
			t.Errorf("parseGCLine(%q) = %+v, %v", c.line, g, ok)
		}
	}
}

// TestGCTracerWindow: the runtime writes a gctrace line in pieces, among
// the server's own lines; the tracer keeps the collections, passes the
// rest on, and counts those whose mark overlaps a window.
func TestGCTracerWindow(t *testing.T) {
	var pass strings.Builder
	tr := newGCTracer(&pass)
	line := "gc 1 @0.1s 1%: 0+200+0 ms clock, 0+150/10/0+0 ms cpu, 8->9->5 MB, 10 MB goal, 1 MB stacks, 0 MB globals, 2 P\n"
	for _, piece := range []string{"a log line\ngc 1 @0.1s 1%: ", line[len("gc 1 @0.1s 1%: "):], "another\n"} {
		if _, err := io.WriteString(tr, piece); err != nil {
			t.Fatal(err)
		}
	}
	if pass.String() != "a log line\nanother\n" {
		t.Errorf("passed on %q", pass.String())
	}
	end := time.Now() // the line arrived just before: its mark began 200 ms before that
	for _, c := range []struct {
		from, to time.Time
		want     int
	}{
		{end.Add(-time.Second), end.Add(time.Second), 1},
		{end.Add(-100 * time.Millisecond), end.Add(time.Second), 1},  // ended inside
		{end.Add(-time.Second), end.Add(-150 * time.Millisecond), 1}, // began inside
		{end.Add(time.Millisecond), end.Add(time.Second), 0},         // over before
		{end.Add(-2 * time.Second), end.Add(-time.Second), 0},        // not begun
	} {
		s := tr.window(c.from, c.to)
		if s.Count != c.want || s.InLife != 1 {
			t.Errorf("window %v to %v: %+v, want %d", c.from.Sub(end), c.to.Sub(end), s, c.want)
		}
	}
	s := tr.window(end.Add(-time.Second), end)
	if s.WallSum != 200*time.Millisecond || s.WallMax != s.WallSum || s.AssistSum != 150*time.Millisecond || s.LiveMBMax != 5 {
		t.Errorf("summary %+v", s)
	}
}

func TestFreshHistoryDir(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--history-dir", dir, "--history", "100"},
		{"--history-dir=" + dir},
		{"-history-dir", "/elsewhere", "--history-dir", dir}, // the last counts
	} {
		got, cleanup, err := freshHistoryDir(args)
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		var fresh string
		for i, a := range got {
			if v, ok := strings.CutPrefix(a, "--history-dir="); ok {
				fresh = v
			} else if strings.TrimLeft(a, "-") == "history-dir" {
				fresh = got[i+1]
			}
		}
		if filepath.Dir(fresh) != dir {
			t.Errorf("%q became %q: not a directory inside %s", args, got, dir)
		}
		if st, err := os.Stat(fresh); err != nil || !st.IsDir() {
			t.Errorf("%q: %s is not there", args, fresh)
		}
		cleanup()
		if _, err := os.Stat(fresh); !os.IsNotExist(err) {
			t.Errorf("%q: %s is still there after the run", args, fresh)
		}
	}
	for _, args := range [][]string{{"--history", "0"}, {"--history-dir", dir, "--history-dir="}} {
		got, _, err := freshHistoryDir(args)
		if err != nil || strings.Join(got, " ") != strings.Join(args, " ") {
			t.Errorf("%q became %q, %v; want it as it was", args, got, err)
		}
	}
	if _, _, err := freshHistoryDir([]string{"--history-dir"}); err == nil {
		t.Error("--history-dir without a directory was taken")
	}
}

// TestSourceAddrsSpread: past connsPerSource connections, connections come
// from further loopback addresses, and a server sees them so.
func TestSourceAddrsSpread(t *testing.T) {
	if s := newSourceAddrs(connsPerSource, true); s.dialer(0) != nil || s.httpClient(0) != nil {
		t.Error("connections that one address holds were spread")
	}
	if s := newSourceAddrs(3*connsPerSource, false); s.dialer(1) != nil {
		t.Error("connections to a server bench did not start were spread")
	}
	s := newSourceAddrs(connsPerSource+1, true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for i, want := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.1"} {
		c, err := s.dialer(i).Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		sc, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if host, _, _ := net.SplitHostPort(sc.RemoteAddr().String()); host != want {
			t.Errorf("connection %d came from %s, want %s", i, host, want)
		}
		c.Close()
		sc.Close()
	}
	if s.httpClient(1) == nil || s.httpClient(1) == s.httpClient(0) {
		t.Error("the gateway's upgrades do not come from the addresses spread")
	}
}

func TestCheckPods(t *testing.T) {
	for _, args := range [][]string{
		{"--json"},
		{"--versus", "--history 0", "--versus", "--history 10"},
		{"--pods", "-1"},
		{"--pods", "10", "--pod-rate", "0"},
		{"--pods", "10", "--members", "1"},
		{"--pods", "10", "--baseline"},
		{"--pods", "10", "--idle", "10"},
		{"--pods", "10", "--peer", "nats", "--gateway", "ws://127.0.0.1:1"},
		{"--pods", "10", "--peer", "kafka"},
	} {
		var stderr strings.Builder
		if code := Run(args, io.Discard, &stderr); code != 2 || stderr.Len() == 0 {
			t.Errorf("Run(%q) = %d (%q), want 2 and a message", args, code, stderr.String())
		}
	}
	if podsWindow(6000) < time.Minute || podsWindow(50) > 10*time.Second {
		t.Errorf("the window's default is %v at 6000 pods, %v at 50", podsWindow(6000), podsWindow(50))
	}
}
