package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpp/gateway/bridge"
	"github.com/mcpp/gateway/bridge/bridgetest"
	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
	"github.com/mcpp/gateway/wire"
)

// Tools in the pod (issue 29): mcpp bridge puts real MCP servers in a
// pod, and participants call them through it with mcp/request envelopes
// (package bridgetest). The servers are the reference server
// @modelcontextprotocol/server-everything from npm, pinned in
// testdata/mcp-servers (it renames its tools between versions), and
// testdata/gomcpserver, built with the official Go SDK, over stdio and
// over Streamable HTTP. The bridge runs as the mcpp binary, as a user runs
// it, or in process (package bridge), under the race detector.

// What the bridge tests need, made ready once per test binary.
var (
	mcpServersOnce sync.Once
	mcpServersErr  error
	goServerOnce   sync.Once
	goServerErr    error
)

// mcpServersDir holds the npm packages of the MCP servers the tests run.
const mcpServersDir = "testdata/mcp-servers"

// everythingServer is the command line of server-everything over stdio.
// Its npm packages are installed first when node_modules is missing,
// exactly as package-lock.json pins them (npm ci), as the TypeScript
// client's tests install theirs.
func everythingServer(t *testing.T) []string {
	t.Helper()
	mcpServersOnce.Do(func() {
		for _, tool := range []string{"node", "npm"} {
			if _, err := exec.LookPath(tool); err != nil {
				mcpServersErr = fmt.Errorf("server-everything needs Node 20 or later and npm: %w", err)
				return
			}
		}
		if _, err := os.Stat(filepath.Join(mcpServersDir, "node_modules")); !os.IsNotExist(err) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = mcpServersDir
		if out, err := cmd.CombinedOutput(); err != nil {
			mcpServersErr = fmt.Errorf("npm ci in integration/%s: %w\n%s", mcpServersDir, err, out)
		}
	})
	if mcpServersErr != nil {
		t.Fatal(mcpServersErr)
	}
	bin, err := filepath.Abs(filepath.Join(mcpServersDir, "node_modules", ".bin", "mcp-server-everything"))
	if err != nil {
		t.Fatal(err)
	}
	return []string{bin, "stdio"}
}

// goServer is the path of testdata/gomcpserver, built once.
func goServer(t testing.TB) string {
	t.Helper()
	path := filepath.Join(harness.BinDir, "gomcpserver")
	goServerOnce.Do(func() {
		if out, err := exec.Command("go", "build", "-o", path, "./testdata/gomcpserver").CombinedOutput(); err != nil {
			goServerErr = fmt.Errorf("go build ./testdata/gomcpserver: %v\n%s", err, out)
		}
	})
	if goServerErr != nil {
		t.Fatal(goServerErr)
	}
	return path
}

// httpServer is gomcpserver serving Streamable HTTP, as its own process.
type httpServer struct {
	t      *testing.T
	cmd    *exec.Cmd
	URL    string // http://127.0.0.1:PORT/mcp
	stderr *harness.SyncBuffer
	exited chan struct{}
}

var listeningRE = regexp.MustCompile(`listening on (http://\S+)`)

// startHTTPServer runs gomcpserver -http addr (127.0.0.1:0 for any port)
// with flags until the test ends.
func startHTTPServer(t *testing.T, addr string, flags ...string) *httpServer {
	t.Helper()
	s := &httpServer{t: t, stderr: &harness.SyncBuffer{}, exited: make(chan struct{})}
	s.cmd = exec.Command(goServer(t), append([]string{"-http", addr}, flags...)...)
	pipe, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	url := make(chan string, 1)
	go func() {
		defer close(s.exited)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			fmt.Fprintln(s.stderr, sc.Text())
			if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil {
				url <- m[1]
			}
		}
		_ = s.cmd.Wait()
	}()
	t.Cleanup(s.kill)
	select {
	case s.URL = <-url:
	case <-s.exited:
		t.Fatalf("gomcpserver -http %s exited before listening", addr)
	case <-time.After(10 * time.Second):
		t.Fatalf("gomcpserver -http %s did not listen within 10s", addr)
	}
	return s
}

// kill kills the server, as a crash would, and waits until it is gone.
func (s *httpServer) kill() {
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// bridgeProc is `mcpp bridge` running as a user runs it.
type bridgeProc struct{ *cliProc }

// startBridgeProc runs `mcpp bridge --pod POD --participant ID FLAGS --
// SERVER...` against g until the test ends, and waits until probe, in
// the pod, sees it join and its server answer.
func startBridgeProc(t *testing.T, g *harness.Gateway, probe *bridgetest.Requester, pod, id string, flags []string, server ...string) bridgeProc {
	t.Helper()
	args := append([]string{"bridge", "--gateway", cliGateway(g), "--pod", pod, "--participant", id}, flags...)
	args = append(append(args, "--"), server...)
	p := bridgeProc{startCLI(t, harness.BuildCommand(t, "mcpp"), args...)}
	t.Cleanup(func() {
		// Stopped as Ctrl-C stops it, so that it stops its server (a
		// killed bridge leaves its server running).
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(os.Interrupt)
			select {
			case <-p.done:
			case <-time.After(20 * time.Second):
			}
		}
		if t.Failed() {
			t.Logf("mcpp bridge's standard error:\n%s", p.stderr.String())
		}
	})
	probe.AwaitJoin(id)
	probe.AwaitUp(id)
	return p
}

// stop interrupts the bridge as Ctrl-C does and returns its exit code.
func (p bridgeProc) stop() int {
	p.t.Helper()
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		p.t.Fatal(err)
	}
	return p.wait()
}

// startBridge runs a bridge in process (package bridge) as participant id
// of pod until the test ends, and waits until probe, in the pod, sees it
// join and its server answer.
func startBridge(t *testing.T, g *harness.Gateway, probe *bridgetest.Requester, pod, id string, server bridge.Server) {
	t.Helper()
	logs := &harness.SyncBuffer{}
	b, err := bridge.New(bridge.Config{
		Gateway: g.WS,
		Client:  client.Options{Pod: pod, Participant: id},
		Server:  server,
		Logf:    func(format string, args ...any) { fmt.Fprintf(logs, format+"\n", args...) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the bridge's Run: %v", err)
		}
		if t.Failed() {
			t.Logf("the bridge's log:\n%s", logs)
		}
	})
	probe.AwaitJoin(id)
	probe.AwaitUp(id)
}

// toolNames lists the tool names of a tools/list answer.
func toolNames(t *testing.T, a bridgetest.Answer) []string {
	t.Helper()
	var res struct{ Tools []struct{ Name string } }
	if a.Error != nil || json.Unmarshal(a.Result, &res) != nil || len(res.Tools) == 0 {
		t.Fatalf("tools/list: %s", a.Envelope.Payload)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names
}

// processGone reports whether no process of id pid runs.
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// TestBridgeEverything: the reference server over stdio, through the
// mcpp binary. A participant lists its tools and calls one; progress
// about its call comes to it alone, with its own token; the server's log
// messages reach the whole pod. Interrupted, the bridge leaves (exit 0).
func TestBridgeEverything(t *testing.T) {
	g := harness.StartGateway(t, nil)
	server := everythingServer(t)
	alice := bridgetest.Dial(t, g.WS, "everything", "alice")
	bob := bridgetest.Dial(t, g.WS, "everything", "bob")
	p := startBridgeProc(t, g, alice, "everything", "everything", nil, server...)

	names := toolNames(t, alice.Call("everything", `{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}`))
	for _, want := range []string{"echo", "get-sum", "trigger-long-running-operation", "toggle-simulated-logging"} {
		if !slices.Contains(names, want) {
			t.Errorf("tools/list has no %s: %v", want, names)
		}
	}
	// server-everything offers its sampling tool only to a client that
	// declared sampling at initialize: the bridge declares none.
	if slices.Contains(names, "trigger-sampling-request") {
		t.Errorf("tools/list offers trigger-sampling-request: the bridge declared sampling")
	}

	a := alice.Call("everything", bridgetest.ToolCall(2, "echo", map[string]any{"message": "hello pod"}))
	if got := a.Text(t); got != "Echo: hello pod" || string(a.ID) != "2" || a.Envelope.From != "everything" {
		t.Fatalf("echo: %s from %s", a.Envelope.Payload, a.Envelope.From)
	}

	long := alice.Send("everything", `{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "trigger-long-running-operation",
		"arguments": {"duration": 0.2, "steps": 2}, "_meta": {"progressToken": "alice-progress"}}}`)
	for i := 1; i <= 2; i++ {
		n := alice.Notification("notifications/progress")
		var pr struct{ Params map[string]any }
		_ = json.Unmarshal(n.Payload, &pr)
		if pr.Params["progressToken"] != "alice-progress" || pr.Params["progress"] != float64(i) || !slices.Equal(n.To, []string{"alice"}) || !n.CorrelationID.Has(long.ID) {
			t.Fatalf("progress %d: to %v, correlation_id %v, payload %s", i, n.To, n.CorrelationID, n.Payload)
		}
	}
	if got := long.Await().Text(t); !strings.Contains(got, "completed") {
		t.Fatalf("the long operation: %q", got)
	}

	alice.Call("everything", bridgetest.ToolCall(4, "toggle-simulated-logging", map[string]any{})).Text(t)
	n := bob.Notification("notifications/message")
	if n.From != "everything" || len(n.To) != 0 {
		t.Fatalf("a log message from %s to %v, want from everything to the pod", n.From, n.To)
	}

	if code := p.stop(); code != 0 {
		t.Fatalf("mcpp bridge exited %d after SIGINT, want 0", code)
	}
}

// TestBridgeStreamableHTTP: a Go SDK server over Streamable HTTP (--url,
// the bridge in process). Tools, resources, prompts and ping; a method
// the server does not know gets its own error; a tool added at run time
// is announced to the pod (the server's event stream); a tool that asks
// the client for sampling gets method not found and reports it.
func TestBridgeStreamableHTTP(t *testing.T) {
	for _, revision := range []string{"legacy", "2026"} {
		t.Run(revision, func(t *testing.T) { bridgeStreamableHTTP(t, revision) })
	}
}

// bridgeStreamableHTTP is TestBridgeStreamableHTTP with a server of MCP
// 2025-11-25 (legacy: sessions, an event stream, a method it does not
// know refused with HTTP 400, requests of its client) or of 2026-07-28
// (stateless, notifications on subscriptions/listen, a method it does not
// know a JSON-RPC error, nothing asked of the client outside a result).
func bridgeStreamableHTTP(t *testing.T, revision string) {
	g := harness.StartGateway(t, nil)
	srv := startHTTPServer(t, "127.0.0.1:0", "-protocol", revision)
	alice := bridgetest.Dial(t, g.WS, "http", "alice")
	bob := bridgetest.Dial(t, g.WS, "http", "bob")
	startBridge(t, g, alice, "http", "gosrv", bridge.Server{URL: srv.URL})

	names := toolNames(t, alice.Call("gosrv", `{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}`))
	if !slices.Contains(names, "echo") || !slices.Contains(names, "ask_llm") {
		t.Fatalf("tools/list: %v", names)
	}
	if got := alice.Call("gosrv", bridgetest.ToolCall(2, "echo", map[string]any{"message": "over HTTP"})).Text(t); got != "Echo: over HTTP" {
		t.Fatalf("echo: %q", got)
	}
	for _, c := range []struct{ payload, want string }{
		{`{"jsonrpc": "2.0", "id": 3, "method": "resources/list"}`, `"uri":"test://greeting"`},
		{`{"jsonrpc": "2.0", "id": 4, "method": "resources/templates/list"}`, `"uriTemplate":"test://notes/{name}"`},
		{`{"jsonrpc": "2.0", "id": 5, "method": "resources/read", "params": {"uri": "test://greeting"}}`, `"text":"hello"`},
		{`{"jsonrpc": "2.0", "id": 6, "method": "prompts/list"}`, `"name":"greet"`},
		{`{"jsonrpc": "2.0", "id": 7, "method": "prompts/get", "params": {"name": "greet", "arguments": {"name": "bob"}}}`, `Say hello to bob`},
		{`{"jsonrpc": "2.0", "id": 8, "method": "ping"}`, `{}`},
	} {
		a := alice.Call("gosrv", c.payload)
		if a.Error != nil || !strings.Contains(string(a.Result), c.want) {
			t.Errorf("%s: %s, want a result with %s", c.payload, a.Envelope.Payload, c.want)
		}
	}
	a := alice.Call("gosrv", `{"jsonrpc": "2.0", "id": 9, "method": "no/such/method"}`)
	if revision == "legacy" {
		// The Go SDK's server refuses a method it does not know with HTTP
		// 400 and its reason: the requester gets that reason as an
		// invalid request, and the server's session goes on.
		if a.Error == nil || a.Error.Code != -32600 || !strings.Contains(a.Error.Message, `"no/such/method" unsupported`) || string(a.ID) != "9" {
			t.Errorf("an unknown method: %s, want invalid request with the server's reason", a.Envelope.Payload)
		}
	} else if a.Error == nil || a.Error.Code != -32601 || string(a.ID) != "9" {
		t.Errorf("an unknown method: %s, want method not found", a.Envelope.Payload)
	}

	alice.Call("gosrv", bridgetest.ToolCall(10, "add_tool", map[string]any{"name": "added"})).Text(t)
	if n := bob.Notification("notifications/tools/list_changed"); n.From != "gosrv" || len(n.To) != 0 {
		t.Fatalf("tools/list_changed from %s to %v, want from gosrv to the pod", n.From, n.To)
	}
	if names := toolNames(t, alice.Call("gosrv", `{"jsonrpc": "2.0", "id": 11, "method": "tools/list"}`)); !slices.Contains(names, "added") {
		t.Fatalf("tools/list after add_tool: %v", names)
	}

	// The bridge offers no sampling: a server of 2025-11-25 that asks is
	// told method not found; one of 2026-07-28 cannot ask outside a
	// result, and says so.
	a = alice.Call("gosrv", bridgetest.ToolCall(12, "ask_llm", map[string]any{"prompt": "hi"}))
	want := "Method not found"
	if revision != "legacy" {
		want = "return an InputRequests map instead"
	}
	if got := a.Text(t); !a.IsToolError() || !strings.Contains(got, want) {
		t.Fatalf("ask_llm: %s, want a tool error saying %s", a.Envelope.Payload, want)
	}
	// Nothing of the bridge's own subscription reaches the pod.
	for {
		select {
		case n := <-bob.Notes:
			if strings.Contains(string(n.Payload), "subscriptions") {
				t.Fatalf("bob was told %s", n.Payload)
			}
			continue
		default:
		}
		break
	}
}

// TestBridgeServerKilled: the server (over stdio, through the mcpp
// binary) is killed in the middle of a call. The caller gets the
// server_down error at once; the bridge starts the server again, and the
// next call succeeds, in a new process. Interrupted, the bridge stops its
// server and exits 0.
func TestBridgeServerKilled(t *testing.T) {
	g := harness.StartGateway(t, nil)
	alice := bridgetest.Dial(t, g.WS, "killed", "alice")
	p := startBridgeProc(t, g, alice, "killed", "srv", nil, goServer(t))

	pid, err := strconv.Atoi(alice.Call("srv", bridgetest.ToolCall(1, "pid", map[string]any{})).Text(t))
	if err != nil {
		t.Fatal(err)
	}
	slow := alice.Send("srv", bridgetest.ToolCall(2, "sleep", map[string]any{"ms": 60000}))
	harness.Eventually(t, 10*time.Second, "the server's sleep", func() bool {
		return strings.Contains(p.stderr.String(), fmt.Sprintf("gomcpserver %d: sleeping", pid))
	})
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a := slow.Await()
	if a.Error == nil || a.Error.Code != wire.RPCConnectionClosed || a.Reason() != wire.MCPReasonServerDown || string(a.ID) != "2" {
		t.Fatalf("the call in flight: %s, want error %d with reason %s", a.Envelope.Payload, wire.RPCConnectionClosed, wire.MCPReasonServerDown)
	}

	alice.AwaitUp("srv")
	again, err := strconv.Atoi(alice.Call("srv", bridgetest.ToolCall(3, "pid", map[string]any{})).Text(t))
	if err != nil || again == pid {
		t.Fatalf("after the restart the server's pid is %d (%v), want a new process, not %d", again, err, pid)
	}

	if code := p.stop(); code != 0 {
		t.Fatalf("mcpp bridge exited %d after SIGINT, want 0", code)
	}
	if !processGone(again) {
		t.Fatalf("the server (pid %d) still runs after the bridge stopped", again)
	}
}

// TestBridgeHTTPServerGone: a Streamable HTTP server that stops
// answering, in the middle of a call: the caller gets the server_down
// error; once the server is back, the bridge connects to it again.
func TestBridgeHTTPServerGone(t *testing.T) {
	g := harness.StartGateway(t, nil)
	addr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	srv := startHTTPServer(t, addr)
	alice := bridgetest.Dial(t, g.WS, "gone", "alice")
	startBridge(t, g, alice, "gone", "srv", bridge.Server{URL: srv.URL})

	slow := alice.Send("srv", bridgetest.ToolCall(1, "sleep", map[string]any{"ms": 60000}))
	harness.Eventually(t, 10*time.Second, "the server's sleep", func() bool {
		return strings.Contains(srv.stderr.String(), "sleeping")
	})
	srv.kill()
	if a := slow.Await(); a.Error == nil || a.Reason() != wire.MCPReasonServerDown {
		t.Fatalf("the call in flight: %s, want server_down", a.Envelope.Payload)
	}

	startHTTPServer(t, addr)
	alice.AwaitUp("srv")
	if got := alice.Call("srv", bridgetest.ToolCall(3, "echo", map[string]any{"message": "back"})).Text(t); got != "Echo: back" {
		t.Fatalf("after the server came back: %q", got)
	}
}

// TestBridgeManyInFlight: 100 calls in flight at once from four
// requesters, who all use the same JSON-RPC ids, answered out of order:
// each once, to its own requester, with its own result.
func TestBridgeManyInFlight(t *testing.T) {
	g := harness.StartGateway(t, nil)
	startBridge(t, g, bridgetest.Dial(t, g.WS, "many", "probe"), "many", "srv", bridge.Server{Command: []string{goServer(t)}})
	const requesters, each = 4, 25
	var wg sync.WaitGroup
	for r := range requesters {
		who := fmt.Sprintf("r%d", r)
		p := bridgetest.Dial(t, g.WS, "many", who)
		wg.Add(1)
		go func() {
			defer wg.Done()
			calls := make([]*bridgetest.Pending, each)
			for i := range each {
				// Later calls wait less: the answers come out of order.
				calls[i] = p.Send("srv", bridgetest.ToolCall(i, "echo", map[string]any{"message": fmt.Sprintf("%s-%d", who, i), "delay_ms": 20 * (each - i)}))
			}
			for i, c := range calls {
				a := c.Await()
				if got := a.Text(t); got != fmt.Sprintf("Echo: %s-%d", who, i) || string(a.ID) != strconv.Itoa(i) {
					t.Errorf("%s's call %d: %s", who, i, a.Envelope.Payload)
				}
			}
			// A second answer to any of them would have come by now: its
			// copy comes right after the first.
			time.Sleep(200 * time.Millisecond)
			for i, c := range calls {
				if len(c.Answers) > 0 {
					t.Errorf("%s's call %d was answered twice", who, i)
				}
			}
			if stray := p.Stray(); len(stray) > 0 {
				t.Errorf("%s got %d answers to calls it did not make", who, len(stray))
			}
		}()
	}
	wg.Wait()
}

// TestBridgeCommandLine: mcpp bridge's usage and exit codes.
func TestBridgeCommandLine(t *testing.T) {
	bin := harness.BuildCommand(t, "mcpp")
	g := harness.StartGateway(t, nil)

	r := runCLI(t, bin, "", "bridge", "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "Usage: mcpp bridge") || !strings.Contains(r.stdout, "--url URL") {
		t.Fatalf("mcpp bridge --help: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--pod", "lab"}, "no MCP server"},
		{[]string{"--pod", "lab", "--url", "http://127.0.0.1:1/mcp", "--", "true"}, "not both"},
		{[]string{"--pod", "lab", "--", "/no/such/server"}, "/no/such/server"},
		{[]string{"--pod", "lab", "--url", "ftp://example.com/mcp"}, "http"},
		{[]string{"--", "true"}, "--pod is required"},
		{[]string{"--pod", "lab", "--max-in-flight", "0", "--", "true"}, "--max-in-flight"},
	} {
		r := runCLI(t, bin, "", append([]string{"bridge", "--gateway", cliGateway(g)}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("mcpp bridge %v: exit %d, stderr %q; want 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
	// An unreachable gateway: 1, before any server is started.
	r = runCLI(t, bin, "", "bridge", "--gateway", fmt.Sprintf("ws://127.0.0.1:%d", harness.FreePort(t)), "--pod", "lab", "--", goServer(t))
	if r.code != 1 || !strings.Contains(r.stderr, "cannot reach the gateway") {
		t.Errorf("an unreachable gateway: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestBridgeReplaced: a bridge whose participant id another connection
// takes (4000) has no pod to serve: it stops its server and exits 1.
func TestBridgeReplaced(t *testing.T) {
	g := harness.StartGateway(t, nil)
	alice := bridgetest.Dial(t, g.WS, "replaced", "alice")
	p := startBridgeProc(t, g, alice, "replaced", "srv", nil, goServer(t))
	pid, err := strconv.Atoi(alice.Call("srv", bridgetest.ToolCall(1, "pid", map[string]any{})).Text(t))
	if err != nil {
		t.Fatal(err)
	}

	g.Dial(t, "replaced", "srv", "")
	if code := p.wait(); code != 1 || !strings.Contains(p.stderr.String(), "replaced") {
		t.Fatalf("mcpp bridge exited %d, want 1 saying it was replaced; stderr:\n%s", code, p.stderr.String())
	}
	if !processGone(pid) {
		t.Fatalf("the server (pid %d) still runs after the bridge exited", pid)
	}
}

// TestBridgeCapabilities: where tokens are required, the bridge joins
// with a token that lets it answer (mcp/response*, mcp/notification) and
// nothing more. A requester whose token allows only the echo tool calls
// it, and nothing else reaches the server: not another tool, and not
// another tool smuggled under a key the gateway's pattern does not read
// ("Params" beside "params"), which the gateway or the bridge refuses.
func TestBridgeCapabilities(t *testing.T) {
	tokens := harness.WriteFile(t, "tokens.json", `{"tokens": [
  {"token": "srv-t", "participant": "srv", "capabilities": ["mcp/response*", "mcp/notification"], "pods": ["caps"]},
  {"token": "ops-t", "participant": "ops", "capabilities": ["mcp/request"], "pods": ["caps"]},
  {"token": "alice-t", "participant": "alice", "capabilities": [{"kind": "mcp/request", "payload": {"method": "tools/call", "params": {"name": "echo"}}}], "pods": ["caps"]}
]}`)
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = tokens })
	ops := bridgetest.DialWith(t, g.WS, client.Options{Pod: "caps", Token: "ops-t"})
	alice := bridgetest.DialWith(t, g.WS, client.Options{Pod: "caps", Token: "alice-t"})
	p := startBridgeProc(t, g, ops, "caps", "srv", []string{"--token", "srv-t"}, goServer(t))

	if got := alice.Call("srv", bridgetest.ToolCall(1, "echo", map[string]any{"message": "allowed"})).Text(t); got != "Echo: allowed" {
		t.Fatalf("echo: %q", got)
	}
	if _, refused := alice.Send("srv", bridgetest.ToolCall(2, "pid", map[string]any{})).Outcome(); refused == nil || refused.Code != wire.CodeCapabilityViolation {
		t.Fatalf("pid: refused %v, want %s", refused, wire.CodeCapabilityViolation)
	}
	smuggled := `{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": "checked"}},
		"Params": {"name": "pid", "arguments": {}}}`
	a, refused := alice.Send("srv", smuggled).Outcome()
	if refused == nil && (a.Error == nil || a.Error.Code != -32600) {
		t.Fatalf("a smuggled call: answered %s, want a refusal", a.Envelope.Payload)
	}
	// The server says each call it runs on its standard error, which is
	// the bridge's, in the order it runs them: alice's echo, then the one
	// ops makes now. Once that one is said, all before it are.
	ops.Call("srv", bridgetest.ToolCall(4, "echo", map[string]any{"message": "last"})).Text(t)
	harness.Eventually(t, 10*time.Second, "the server's line about the last echo", func() bool {
		return strings.Count(p.stderr.String(), "tools/call echo") >= 2
	})
	if calls := regexp.MustCompile(`tools/call \S+`).FindAllString(p.stderr.String(), -1); !slices.Equal(calls, []string{"tools/call echo", "tools/call echo"}) {
		t.Fatalf("the server ran %v, want echo twice and nothing else", calls)
	}
}
