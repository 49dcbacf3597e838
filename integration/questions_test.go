package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/tidwall/gjson"

	"github.com/mcpp/gateway/bridge/bridgetest"
	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
	"github.com/mcpp/gateway/wire"
)

// The whole of MCP through the pod (issue 35, docs/protocol.md sections 9
// and 11): what a server asks while it handles a call reaches the
// participant whose call caused it, whoever it is (a WebSocket
// participant, an MCP host on /mcp), and nobody else; progress,
// cancellation and the call's _meta travel end to end. The servers are
// real: @modelcontextprotocol/server-everything (npm, pinned: MCP
// 2025-11-25, over stdio) and testdata/gomcpserver (the official Go SDK:
// every revision, or 2025-11-25 alone, or 2026-07-28 alone; over stdio
// and Streamable HTTP), each through `mcpp bridge`.

// questionPod starts an open gateway with history (the MCP endpoint reads
// it).
func questionPod(t *testing.T) *harness.Gateway {
	t.Helper()
	return harness.StartGateway(t, func(c *gateway.Config) { c.History = 1000 })
}

// questionOf checks that q is the bridge's question of method, to r alone,
// correlated to r's request p.
func questionOf(t *testing.T, q *wire.Envelope, bridgeID string, r *bridgetest.Requester, p *bridgetest.Pending, method string) {
	t.Helper()
	var payload struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	_ = json.Unmarshal(q.Payload, &payload)
	if q.From != bridgeID || !slices.Equal(q.To, []string{r.ID()}) || !slices.Equal(q.CorrelationID, []string{p.ID}) || payload.Method != method || payload.ID == nil {
		t.Fatalf("%s's question: from %s to %v, correlation %v, payload %s", r.ID(), q.From, q.To, q.CorrelationID, q.Payload)
	}
}

// TestQuestionToWebSocketCaller: server-everything's
// trigger-elicitation-request (offered because the bridge declares
// elicitation) asks the caller over WebSocket; accepted, declined and
// cancelled answers reach the server, which says what it got.
func TestQuestionToWebSocketCaller(t *testing.T) {
	t.Parallel()
	g := questionPod(t)
	const pod = "questions-ws"
	alice := bridgetest.Dial(t, g.WS, pod, "alice")
	b := startBridgeProc(t, g, alice, pod, "everything", nil, everythingServer(t)...)
	if !strings.Contains(b.stderr.String(), "MCP 2025-11-25") {
		t.Fatalf("the bridge does not say which revision its server speaks:\n%s", b.stderr.String())
	}
	for _, tc := range []struct{ answer, want string }{
		{`{"action":"accept","content":{"name":"Alice Liddell"}}`, "Alice Liddell"},
		{`{"action":"decline"}`, "declined"},
		{`{"action":"cancel"}`, "cancelled"},
	} {
		p := alice.Send("everything", bridgetest.ToolCall(1, "trigger-elicitation-request", struct{}{}))
		q := alice.Question()
		questionOf(t, q, "everything", alice, p, "elicitation/create")
		alice.Reply(q, tc.answer)
		if text := allText(t, p.Await()); !strings.Contains(text, tc.want) {
			t.Fatalf("after %s the server said:\n%s", tc.answer, text)
		}
	}
}

// greeted calls server's ask_name as r, answers its question with name,
// and checks the server's greeting.
func greeted(t *testing.T, r *bridgetest.Requester, server string, id any, name string) {
	t.Helper()
	p := r.Send(server, bridgetest.ToolCall(id, "ask_name", struct{}{}))
	r.Reply(r.Question(), `{"action":"accept","content":{"name":"`+name+`"}}`)
	if got, want := p.Await().Text(t), "Hello, "+name+" (state asked)"; got != want {
		t.Fatalf("%s's call of %s: %q, want %q", r.ID(), server, got, want)
	}
}

// allText is every text of a tools/call result, joined.
func allText(t *testing.T, a bridgetest.Answer) string {
	t.Helper()
	var res struct {
		Content []struct{ Text string } `json:"content"`
	}
	if a.Error != nil || json.Unmarshal(a.Result, &res) != nil {
		t.Fatalf("not a tool's result: %s", a.Envelope.Payload)
	}
	var out []string
	for _, c := range res.Content {
		out = append(out, c.Text)
	}
	return strings.Join(out, "\n")
}

// TestQuestionToMCPHost: an MCP host (the official Go SDK's client with an
// elicitation handler) that calls a tool that asks its user answers on
// its own session: on MCP 2025-11-25 as elicitation/create, on 2026-07-28
// as an input request of the call's result; a host that declared no
// elicitation does not hear it, and the server is told method not found.
func TestQuestionToMCPHost(t *testing.T) {
	t.Parallel()
	g := questionPod(t)
	const pod = "questions-host"
	probe := bridgetest.Dial(t, g.WS, pod, "probe")
	startBridgeProc(t, g, probe, pod, "everything", nil, everythingServer(t)...)
	startBridgeProc(t, g, probe, pod, "tools", nil, goServer(t))
	for _, version := range []string{harness.MCPSessions, ""} {
		asked := make(chan *mcp.ElicitParams, 4)
		host := harness.MCPConnect(t, g.URL, pod, "host"+strings.ReplaceAll(version, "-", ""), harness.MCPOpts{Version: version,
			Client: &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				asked <- req.Params
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Hosted Harriet"}}, nil
			}}})
		harness.Eventually(t, 10*time.Second, "the host lists the servers' tools", func() bool {
			names := toolNamesOf(t, host)
			return slices.Contains(names, "everything__trigger-elicitation-request") && slices.Contains(names, "tools__ask_name")
		})
		for _, tool := range []string{"everything__trigger-elicitation-request", "tools__ask_name"} {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			res, err := host.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}})
			cancel()
			if err != nil || res.IsError || !strings.Contains(resultText(res), "Hosted Harriet") {
				t.Fatalf("MCP %q, %s: %v %s", version, tool, err, resultText(res))
			}
			select {
			case p := <-asked:
				if p.Message == "" {
					t.Fatalf("MCP %q, %s: the host was asked %+v", version, tool, p)
				}
			default:
				t.Fatalf("MCP %q, %s: the host's elicitation handler was not called", version, tool)
			}
		}
	}
	// A host without elicitation: the server hears -32601.
	mute := harness.MCPConnect(t, g.URL, pod, "mute", harness.MCPOpts{Version: harness.MCPSessions})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := mute.CallTool(ctx, &mcp.CallToolParams{Name: "tools__ask_name", Arguments: map[string]any{}})
	if err == nil && !res.IsError && strings.Contains(resultText(res), "Hello") {
		t.Fatalf("a host without elicitation was answered %s", resultText(res))
	}
	if text := fmt.Sprint(err, resultText(res)); !strings.Contains(strings.ToLower(text), "method not found") {
		t.Fatalf("a host without elicitation: %s", text)
	}
}

// resultText is the texts of a tool's result, joined.
func resultText(res *mcp.CallToolResult) string {
	if res == nil {
		return ""
	}
	var out []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			out = append(out, tc.Text)
		}
	}
	return strings.Join(out, "\n")
}

// TestQuestionGoesToItsOwnCaller: two callers of a Streamable HTTP server
// (MCP 2025-11-25, whose questions come on each call's own stream) each
// get their own question, correlated to their own call, and their own
// answer back; over 2026-07-28 (input requests) and over stdio alike.
func TestQuestionGoesToItsOwnCaller(t *testing.T) {
	t.Parallel()
	g := questionPod(t)
	const pod = "questions-own"
	alice := bridgetest.Dial(t, g.WS, pod, "alice")
	bob := bridgetest.Dial(t, g.WS, pod, "bob")
	legacy := startHTTPServer(t, "127.0.0.1:0", "-protocol", "legacy")
	only2026 := startHTTPServer(t, "127.0.0.1:0", "-protocol", "2026")
	bl := startBridgeProc(t, g, alice, pod, "legacy", []string{"--url", legacy.URL})
	bm := startBridgeProc(t, g, alice, pod, "modern", []string{"--url", only2026.URL})
	startBridgeProc(t, g, alice, pod, "stdio", nil, goServer(t))
	if !strings.Contains(bl.stderr.String(), "MCP 2025-11-25") || !strings.Contains(bm.stderr.String(), "MCP 2026-07-28") {
		t.Fatalf("the bridges' revisions:\n%s\n%s", bl.stderr.String(), bm.stderr.String())
	}
	for _, server := range []string{"legacy", "modern", "stdio"} {
		pa := alice.Send(server, bridgetest.ToolCall(1, "ask_name", struct{}{}))
		qa := alice.Question()
		questionOf(t, qa, server, alice, pa, "elicitation/create")
		pb := bob.Send(server, bridgetest.ToolCall(1, "ask_name", struct{}{}))
		qb := bob.Question()
		questionOf(t, qb, server, bob, pb, "elicitation/create")
		// Answered in the other order, each answer goes to its own call.
		bob.Reply(qb, `{"action":"accept","content":{"name":"Bob"}}`)
		alice.Reply(qa, `{"action":"accept","content":{"name":"Alice"}}`)
		if got := pb.Await().Text(t); got != "Hello, Bob (state asked)" {
			t.Fatalf("%s: bob's call: %s", server, got)
		}
		if got := pa.Await().Text(t); got != "Hello, Alice (state asked)" {
			t.Fatalf("%s: alice's call: %s", server, got)
		}
	}
	select {
	case q := <-alice.Questions:
		t.Fatalf("alice was asked more: %s", q.Payload)
	case q := <-bob.Questions:
		t.Fatalf("bob was asked more: %s", q.Payload)
	default:
	}
}

// TestQuestionWithSeveralCallsOverStdio: over stdio nothing says which
// call a server's request belongs to; with two calls in flight the bridge
// does not guess: the server is told ambiguous_caller, and nobody is
// asked.
func TestQuestionWithSeveralCallsOverStdio(t *testing.T) {
	t.Parallel()
	g := questionPod(t)
	const pod = "questions-two"
	alice := bridgetest.Dial(t, g.WS, pod, "alice")
	bob := bridgetest.Dial(t, g.WS, pod, "bob")
	b := startBridgeProc(t, g, alice, pod, "tools", []string{"--protocol", "2025-11-25"}, goServer(t))
	slow := bob.Send("tools", bridgetest.ToolCall(1, "sleep", map[string]any{"ms": 3000}))
	harness.Eventually(t, 10*time.Second, "the server sleeping", func() bool { return strings.Contains(b.stderr.String(), "sleeping") })
	a := alice.Call("tools", bridgetest.ToolCall(2, "ask_name", struct{}{}))
	text := string(a.Envelope.Payload)
	if !strings.Contains(text, "several calls are in flight") && !strings.Contains(text, "ambiguous_caller") {
		t.Fatalf("alice's call with another in flight: %s", text)
	}
	if got := slow.Await().Text(t); got != "slept 3000 ms" {
		t.Fatalf("bob's call: %s", got)
	}
	select {
	case q := <-alice.Questions:
		t.Fatalf("alice was asked %s", q.Payload)
	case q := <-bob.Questions:
		t.Fatalf("bob was asked %s", q.Payload)
	default:
	}
	// With one call in flight, it is that caller's.
	p := alice.Send("tools", bridgetest.ToolCall(3, "ask_name", struct{}{}))
	q := alice.Question()
	questionOf(t, q, "tools", alice, p, "elicitation/create")
	alice.Reply(q, `{"action":"decline"}`)
	if got := p.Await().Text(t); got != "no name: the user chose to decline" {
		t.Fatalf("the declined question: %s", got)
	}
}

// TestQuestionCallerGone: a caller that leaves while its question waits
// is answered for by the gateway (recipient_left); the server gets that
// answer, the bridge and the server go on, and the next caller is asked
// as usual.
func TestQuestionCallerGone(t *testing.T) {
	t.Parallel()
	g := questionPod(t)
	const pod = "questions-gone"
	probe := bridgetest.Dial(t, g.WS, pod, "probe")
	b := startBridgeProc(t, g, probe, pod, "tools", []string{"--protocol", "2025-11-25"}, goServer(t))
	alice := bridgetest.Dial(t, g.WS, pod, "alice")
	alice.Send("tools", bridgetest.ToolCall(1, "ask_name", struct{}{}))
	alice.Question()
	_ = alice.Client().Close()
	harness.Eventually(t, 10*time.Second, "the server told that its question will not be answered", func() bool {
		return strings.Contains(b.stderr.String(), "tools/call ask_name failed") && strings.Contains(b.stderr.String(), "left the pod")
	})
	greeted(t, bridgetest.Dial(t, g.WS, pod, "bob"), "tools", 2, "Bob")
}

// TestQuestionBadInput: a caller that answers a question twice, or with
// something that is not a JSON-RPC response; a participant that asks
// someone whose call did not cause the question, or asks for another's
// call; a server that asks more questions at once than a call may have
// waiting: each gets its documented error, and the other calls go on.
func TestQuestionBadInput(t *testing.T) {
	t.Parallel()
	g := questionPod(t)
	const pod = "questions-bad"
	alice := bridgetest.Dial(t, g.WS, pod, "alice")
	mallory := bridgetest.Dial(t, g.WS, pod, "mallory")
	startBridgeProc(t, g, alice, pod, "tools", nil, goServer(t))

	// Twice: the second is refused, the first counts.
	p := alice.Send("tools", bridgetest.ToolCall(1, "ask_name", struct{}{}))
	q := alice.Question()
	alice.Reply(q, `{"action":"accept","content":{"name":"Once"}}`)
	if got := p.Await().Text(t); got != "Hello, Once (state asked)" {
		t.Fatalf("the answered call: %s", got)
	}
	again := alice.ReplyRaw(q, `{"jsonrpc":"2.0","id":1,"result":{"action":"accept","content":{"name":"Twice"}}}`)
	select {
	case ge := <-again.Refusals:
		if ge.Code != wire.CodeNoPendingRequest {
			t.Fatalf("a second answer: %v", ge)
		}
	case <-time.After(bridgetest.Wait):
		t.Fatal("a second answer was not refused")
	}

	// Not a response: the call ends with bad_answer.
	p = alice.Send("tools", bridgetest.ToolCall(2, "ask_name", struct{}{}))
	q = alice.Question()
	alice.ReplyRaw(q, `{"jsonrpc":"2.0","nothing":true}`)
	if a := p.Await(); a.Error == nil || !strings.Contains(string(a.Envelope.Payload), "bad_answer") {
		t.Fatalf("a call whose question was answered with junk: %s", a.Envelope.Payload)
	}

	// A question to one whose call did not cause it, or for another's call.
	ask := func(to string, corr wire.CorrelationID) {
		env := &wire.Envelope{ID: fmt.Sprint("ask-", to, len(corr)), Kind: wire.KindMCPRequest, To: []string{to}, CorrelationID: corr,
			Payload: json.RawMessage(`{"jsonrpc":"2.0","id":9,"method":"elicitation/create","params":{"message":"your password?"}}`)}
		ctx, cancel := context.WithTimeout(context.Background(), bridgetest.Wait)
		defer cancel()
		if _, err := mallory.Client().Send(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
	inFlight := alice.Send("tools", bridgetest.ToolCall(3, "sleep", map[string]any{"ms": 2000}))
	for _, corr := range []wire.CorrelationID{nil, {inFlight.ID}, {"no-such-call"}} {
		ask("alice", corr)
	}
	refused := 0
	deadline := time.After(bridgetest.Wait)
	for refused < 3 {
		select {
		case <-deadline:
			t.Fatalf("%d of mallory's 3 questions were refused", refused)
		case ev := <-mallory.Errors():
			if ev.Code != wire.CodeInvalidRecipient && ev.Code != wire.CodeInvalidEnvelope {
				t.Fatalf("mallory's question: %v", ev)
			}
			refused++
		}
	}
	if got := inFlight.Await().Text(t); got != "slept 2000 ms" {
		t.Fatalf("alice's call meanwhile: %s", got)
	}
	select {
	case q := <-alice.Questions:
		t.Fatalf("alice was asked %s", q.Payload)
	default:
	}

	// A flood: more questions at once than a call may have waiting.
	a := alice.Call("tools", bridgetest.ToolCall(4, "ask_many", map[string]any{"steps": 20}))
	if a.Error == nil || !strings.Contains(string(a.Envelope.Payload), "too_many_questions") {
		t.Fatalf("a flood of questions: %s", a.Envelope.Payload)
	}
	// Within the bound, each is asked, and the call goes on.
	p = alice.Send("tools", bridgetest.ToolCall(5, "ask_many", map[string]any{"steps": 2}))
	alice.Reply(alice.Question(), `{"action":"accept","content":{"x":"1"}}`)
	alice.Reply(alice.Question(), `{"action":"accept","content":{"x":"2"}}`)
	if got := p.Await().Text(t); got != "2 answered" {
		t.Fatalf("two questions at once: %s", got)
	}
}

// TestProgressMetaAndCancelFromMCPHost: an MCP host's call carries its
// _meta to the server (the trace context and its own keys as they came);
// its progress token is the pod's on the way and the host's own again on
// the way back; when the host cancels, the server is told, and the pod
// releases the call. A WebSocket participant that cancels another's call
// is refused, and the call goes on.
func TestProgressMetaAndCancelFromMCPHost(t *testing.T) {
	t.Parallel()
	g := questionPod(t)
	const pod = "host-progress"
	probe := bridgetest.Dial(t, g.WS, pod, "probe")
	b := startBridgeProc(t, g, probe, pod, "tools", nil, goServer(t))
	startBridgeProc(t, g, probe, pod, "everything", nil, everythingServer(t)...)
	var mu sync.Mutex
	var progress []string
	host := harness.MCPConnect(t, g.URL, pod, "host", harness.MCPOpts{Version: harness.MCPSessions,
		Client: &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			progress = append(progress, fmt.Sprintf("%v %v/%v", req.Params.ProgressToken, req.Params.Progress, req.Params.Total))
			mu.Unlock()
		}}})
	harness.Eventually(t, 10*time.Second, "the host lists the servers' tools", func() bool {
		names := toolNamesOf(t, host)
		return slices.Contains(names, "tools__meta") && slices.Contains(names, "everything__trigger-long-running-operation")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	res, err := host.CallTool(ctx, &mcp.CallToolParams{Name: "tools__meta", Arguments: map[string]any{},
		Meta: mcp.Meta{"traceparent": traceparent, "tracestate": "vendor=1", "acme.example/tenant": "blue"}})
	if err != nil || res.IsError {
		t.Fatalf("tools__meta: %v %s", err, resultText(res))
	}
	var seen map[string]any
	if err := json.Unmarshal([]byte(resultText(res)), &seen); err != nil || seen["traceparent"] != traceparent ||
		seen["tracestate"] != "vendor=1" || seen["acme.example/tenant"] != "blue" {
		t.Fatalf("the server saw _meta %s", resultText(res))
	}

	for _, call := range []*mcp.CallToolParams{
		{Name: "tools__progress", Arguments: map[string]any{"steps": 3}, Meta: mcp.Meta{"progressToken": "host-token-1"}},
		{Name: "everything__trigger-long-running-operation", Arguments: map[string]any{"duration": 1, "steps": 2}, Meta: mcp.Meta{"progressToken": 77}},
	} {
		mu.Lock()
		progress = nil
		mu.Unlock()
		res, err := host.CallTool(ctx, call)
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %s", call.Name, err, resultText(res))
		}
		want := []string{"host-token-1 1/3", "host-token-1 2/3", "host-token-1 3/3"}
		if call.Name != "tools__progress" {
			want = []string{"77 1/2", "77 2/2"}
		}
		harness.Eventually(t, 5*time.Second, "the host hears "+call.Name+"'s progress", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(progress) >= len(want)
		})
		mu.Lock()
		got := slices.Clone(progress)
		mu.Unlock()
		if !slices.Equal(got, want) {
			t.Fatalf("%s: the host heard progress %q, want %q", call.Name, got, want)
		}
	}

	// The host cancels: the server is told.
	callCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := host.CallTool(callCtx, &mcp.CallToolParams{Name: "tools__sleep", Arguments: map[string]any{"ms": 60000}})
		done <- err
	}()
	harness.Eventually(t, 10*time.Second, "the server sleeping", func() bool { return strings.Contains(b.stderr.String(), "sleeping 60000 ms") })
	stop()
	<-done
	harness.Eventually(t, 10*time.Second, "the server told of the host's cancellation", func() bool {
		return strings.Contains(b.stderr.String(), "sleep cancelled")
	})

	// A participant cancels a call that is not its own: refused, and the
	// call goes on.
	alice := bridgetest.Dial(t, g.WS, pod, "alice")
	mallory := bridgetest.Dial(t, g.WS, pod, "mallory")
	p := alice.Send("tools", bridgetest.ToolCall("a-1", "sleep", map[string]any{"ms": 1000}))
	cancelEnv := &wire.Envelope{Kind: wire.KindMCPRequest, To: []string{"tools"},
		Payload: json.RawMessage(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"a-1"}}`)}
	if _, err := mallory.Client().Send(ctx, cancelEnv); err != nil {
		t.Fatal(err)
	}
	select {
	case ge := <-mallory.Errors():
		if ge.Code != wire.CodeNoPendingRequest {
			t.Fatalf("mallory's cancellation: %v", ge)
		}
	case <-time.After(bridgetest.Wait):
		t.Fatal("mallory's cancellation of alice's call was not refused")
	}
	if got := p.Await().Text(t); got != "slept 1000 ms" {
		t.Fatalf("alice's call: %s", got)
	}
}

// TestTaskThroughTheBridge: a task-augmented call (MCP 2025-11-25's
// params.task) of server-everything's simulate-research-query returns the
// server's task; its requester polls it (tasks/get), and asks for its
// result (tasks/result), during which the server's question about the
// task reaches that requester alone; another participant sees none of the
// task (tasks/list, tasks/get).
func TestTaskThroughTheBridge(t *testing.T) {
	t.Parallel()
	g := questionPod(t)
	const pod = "tasks-ws"
	alice := bridgetest.Dial(t, g.WS, pod, "alice")
	bob := bridgetest.Dial(t, g.WS, pod, "bob")
	startBridgeProc(t, g, alice, pod, "everything", nil, everythingServer(t)...)

	created := alice.Call("everything", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"simulate-research-query",
		"arguments":{"topic":"python","ambiguous":true},"task":{"ttl":60000}}}`)
	var made struct {
		Task struct {
			TaskID string `json:"taskId"`
			Status string `json:"status"`
		} `json:"task"`
	}
	if created.Error != nil || json.Unmarshal(created.Result, &made) != nil || made.Task.TaskID == "" {
		t.Fatalf("the task-augmented call: %s", created.Envelope.Payload)
	}
	task := made.Task.TaskID
	get := func(r *bridgetest.Requester, id int) bridgetest.Answer {
		return r.Call("everything", fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tasks/get","params":{"taskId":%q}}`, id, task))
	}
	if a := get(alice, 2); a.Error != nil || !strings.Contains(string(a.Result), task) {
		t.Fatalf("tasks/get by its requester: %s", a.Envelope.Payload)
	}
	if a := get(bob, 3); a.Error == nil || a.Error.Code != -32602 {
		t.Fatalf("tasks/get of alice's task by bob: %s", a.Envelope.Payload)
	}
	if a := bob.Call("everything", `{"jsonrpc":"2.0","id":4,"method":"tasks/list"}`); a.Error != nil || strings.Contains(string(a.Result), task) {
		t.Fatalf("tasks/list by bob: %s", a.Envelope.Payload)
	}
	if a := alice.Call("everything", `{"jsonrpc":"2.0","id":5,"method":"tasks/list"}`); a.Error != nil || !strings.Contains(string(a.Result), task) {
		t.Fatalf("tasks/list by alice: %s", a.Envelope.Payload)
	}
	// The result: the server asks its question (the task is
	// input_required) while alice waits for it.
	result := alice.Send("everything", fmt.Sprintf(`{"jsonrpc":"2.0","id":6,"method":"tasks/result","params":{"taskId":%q}}`, task))
	q := alice.Question()
	questionOf(t, q, "everything", alice, result, "elicitation/create")
	alice.Reply(q, `{"action":"accept","content":{"interpretation":"snake"}}`)
	if text := allText(t, result.Await()); !strings.Contains(text, "python (snake)") {
		t.Fatalf("the task's result: %s", text)
	}
	select {
	case q := <-bob.Questions:
		t.Fatalf("bob was asked %s", q.Payload)
	default:
	}
}

// TestURLElicitationToWebSocketCaller: a tool that asks its caller to open
// a URL (server-everything's trigger-url-elicitation, offered because the
// bridge declares URL mode; the Go SDK server's ask_url) reaches the
// caller; the caller accepts; the server's
// notifications/elicitation/complete about it is addressed to that caller
// alone, correlated to its call.
func TestURLElicitationToWebSocketCaller(t *testing.T) {
	t.Parallel()
	g := questionPod(t)
	const pod = "questions-url"
	alice := bridgetest.Dial(t, g.WS, pod, "alice")
	startBridgeProc(t, g, alice, pod, "everything", nil, everythingServer(t)...)
	startBridgeProc(t, g, alice, pod, "tools", []string{"--protocol", "2025-11-25"}, goServer(t))
	p := alice.Send("everything", bridgetest.ToolCall(1, "trigger-url-elicitation", map[string]any{"url": "https://example.com/consent", "elicitationId": "consent-0"}))
	q := alice.Question()
	questionOf(t, q, "everything", alice, p, "elicitation/create")
	if !strings.Contains(string(q.Payload), `"mode":"url"`) || !strings.Contains(string(q.Payload), "https://example.com/consent") {
		t.Fatalf("the URL question: %s", q.Payload)
	}
	alice.Reply(q, `{"action":"accept"}`)
	if text := allText(t, p.Await()); !strings.Contains(text, "completed the URL elicitation") {
		t.Fatalf("the call: %s", text)
	}

	p = alice.Send("tools", bridgetest.ToolCall(2, "ask_url", struct{}{}))
	q = alice.Question()
	questionOf(t, q, "tools", alice, p, "elicitation/create")
	alice.Reply(q, `{"action":"accept"}`)
	n := alice.Notification("notifications/elicitation/complete")
	if !slices.Equal(n.To, []string{"alice"}) || !slices.Equal(n.CorrelationID, []string{p.ID}) || !strings.Contains(string(n.Payload), "consent-1") {
		t.Fatalf("the completion: to %v, correlation %v, %s", n.To, n.CorrelationID, n.Payload)
	}
	if got := p.Await().Text(t); got != "the user chose to accept" {
		t.Fatalf("ask_url: %s", got)
	}
}

// TestQuestionCapabilities: capabilities govern questions. A bridge whose
// token does not allow mcp/request of elicitation/create has its question
// refused by the gateway, and its server is told at once (no hang); with
// the documented capability it asks. A caller whose token does not allow
// mcp/response cannot answer: the gateway answers for it when the call
// times out (--mcp-request-timeout).
func TestQuestionCapabilities(t *testing.T) {
	t.Parallel()
	tokens := harness.WriteFile(t, "tokens.json", `{"tokens": [
  {"token": "plain-t", "participant": "plain", "capabilities": ["mcp/response*", "mcp/notification"], "pods": ["*"]},
  {"token": "asker-t", "participant": "asker", "capabilities": ["mcp/response*", "mcp/notification",
     {"kind": "mcp/request", "payload": {"method": ["elicitation/create", "notifications/cancelled"]}}], "pods": ["*"]},
  {"token": "alice-t", "participant": "alice", "capabilities": ["chat", "mcp/request", "mcp/response"], "pods": ["*"]},
  {"token": "mute-t", "participant": "mute", "capabilities": ["chat", "mcp/request"], "pods": ["*"]}
]}`)
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.History = 1000
		c.Tokens = tokens
		c.MCPRequestTimeout = 2 * time.Second
	})
	const pod = "questions-caps"
	alice := bridgetest.DialWith(t, g.WS, client.Options{Pod: pod, Token: "alice-t"})
	mute := bridgetest.DialWith(t, g.WS, client.Options{Pod: pod, Token: "mute-t"})
	startBridgeProc(t, g, alice, pod, "plain", []string{"--token", "plain-t"}, goServer(t))
	startBridgeProc(t, g, alice, pod, "asker", []string{"--token", "asker-t"}, goServer(t))

	start := time.Now()
	a := alice.Call("plain", bridgetest.ToolCall(1, "ask_name", struct{}{}))
	if a.Error == nil || !strings.Contains(string(a.Envelope.Payload), "capability_violation") || time.Since(start) > 5*time.Second {
		t.Fatalf("a question its bridge may not ask (after %v): %s", time.Since(start), a.Envelope.Payload)
	}
	greeted(t, alice, "asker", 2, "Alice") // the documented capability
	p := mute.Send("asker", bridgetest.ToolCall(3, "ask_name", struct{}{}))
	refused := mute.ReplyRaw(mute.Question(), `{"jsonrpc":"2.0","id":0,"result":{"action":"accept","content":{"name":"Mute"}}}`)
	select {
	case ge := <-refused.Refusals:
		if ge.Code != wire.CodeCapabilityViolation {
			t.Fatalf("mute's answer: %v", ge)
		}
	case <-time.After(bridgetest.Wait):
		t.Fatal("mute's answer was not refused")
	}
	if a := p.Await(); a.Error == nil || !strings.Contains(string(a.Envelope.Payload), wire.MCPReasonTimeout) {
		t.Fatalf("mute's call: %s", a.Envelope.Payload)
	}
}

// TestTaskFromMCPHost: an MCP host makes a task-augmented call of a pod
// server's tool on /mcp (as MCP 2025-11-25 has it: the Go SDK has no
// tasks, so the host speaks them on its session over HTTP) and gets the
// server's task under an id that says whose it is; it polls and lists it,
// and fetches its result, during which the server's question about the
// task reaches the host's own session (its elicitation handler); a task id
// that names no task of the pod's servers is refused.
func TestTaskFromMCPHost(t *testing.T) {
	t.Parallel()
	g := questionPod(t)
	const pod = "tasks-host"
	probe := bridgetest.Dial(t, g.WS, pod, "probe")
	startBridgeProc(t, g, probe, pod, "everything", nil, everythingServer(t)...)
	asked := make(chan string, 4)
	host := harness.MCPConnect(t, g.URL, pod, "host", harness.MCPOpts{Version: harness.MCPSessions,
		Client: &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked <- req.Params.Message
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"interpretation": "snake"}}, nil
		}}})
	harness.Eventually(t, 10*time.Second, "the host lists simulate-research-query", func() bool {
		return slices.Contains(toolNamesOf(t, host), "everything__simulate-research-query")
	})
	post := func(body string) (result, rpcErr json.RawMessage) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, g.URL+"/mcp?pod="+pod+"&participant=host", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", host.ID())
		req.Header.Set("Mcp-Protocol-Version", harness.MCPSessions)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a struct {
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			t.Fatalf("%s: HTTP %d, %v", body, resp.StatusCode, err)
		}
		return a.Result, a.Error
	}
	res, rpcErr := post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"everything__simulate-research-query",
		"arguments":{"topic":"python","ambiguous":true},"task":{"ttl":60000}}}`)
	task := gjson.GetBytes(res, "task.taskId").Str
	if rpcErr != nil || !strings.HasPrefix(task, "everything__") {
		t.Fatalf("the task-augmented call: %s %s", res, rpcErr)
	}
	if res, rpcErr := post(fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":%q}}`, task)); rpcErr != nil || gjson.GetBytes(res, "taskId").Str != task {
		t.Fatalf("tasks/get: %s %s", res, rpcErr)
	}
	if res, rpcErr := post(`{"jsonrpc":"2.0","id":3,"method":"tasks/list"}`); rpcErr != nil || !strings.Contains(string(res), task) {
		t.Fatalf("tasks/list: %s %s", res, rpcErr)
	}
	if _, rpcErr := post(`{"jsonrpc":"2.0","id":4,"method":"tasks/get","params":{"taskId":"nobody__x"}}`); rpcErr == nil {
		t.Fatal("tasks/get of a task of nobody's was answered")
	}
	res, rpcErr = post(fmt.Sprintf(`{"jsonrpc":"2.0","id":5,"method":"tasks/result","params":{"taskId":%q}}`, task))
	if rpcErr != nil || !strings.Contains(string(res), "python (snake)") {
		t.Fatalf("tasks/result: %s %s", res, rpcErr)
	}
	select {
	case msg := <-asked:
		if !strings.Contains(msg, "python") {
			t.Fatalf("the host was asked %q", msg)
		}
	default:
		t.Fatal("the host's elicitation handler was not called")
	}
}
