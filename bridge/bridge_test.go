package bridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpp/gateway/bridge"
	"github.com/mcpp/gateway/bridge/bridgetest"
	"github.com/mcpp/gateway/gateway/gatewaytest"
	"github.com/mcpp/gateway/internal/wait"
	"github.com/mcpp/gateway/wire"
)

type echoArgs struct {
	Message string `json:"message"`
	DelayMS int    `json:"delay_ms,omitempty"`
}

// testServer is an MCP server of the official SDK with the tools these
// tests call. started receives the context of each call of "block",
// which waits until that context ends.
func testServer(t *testing.T, started chan<- context.Context) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "bridge-test", Version: "1"}, nil)
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(ctx context.Context, _ *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
		select {
		case <-time.After(time.Duration(a.DelayMS) * time.Millisecond):
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		return text(a.Message), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "block"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		started <- ctx
		<-ctx.Done()
		return nil, nil, ctx.Err()
	})
	mcp.AddTool(s, &mcp.Tool{Name: "progress"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		for i := 1; i <= 2; i++ {
			err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: float64(i), Total: 2})
			if err != nil {
				return nil, nil, err
			}
		}
		return text("done"), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "ask_client"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		// What the bridge answers each request a server may make of its
		// client, one line each.
		var lines []string
		report := func(method string, err error) {
			lines = append(lines, fmt.Sprintf("%s: %v", method, err))
		}
		_, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}}})
		report("sampling/createMessage", err)
		// (The SDK's server asks for elicitation only of a client that
		// declared it: the bridge never sees that request.)
		_, err = req.Session.ListRoots(ctx, nil)
		report("roots/list", err)
		report("ping", req.Session.Ping(ctx, nil))
		return text(strings.Join(lines, "\n")), nil, nil
	})
	return s
}

// TestSameIDsFromTwoRequesters: requesters choose their JSON-RPC ids
// themselves, and two choose the same; each gets its own answer, under
// its own id, in the request's context, correlated to its own request.
func TestSameIDsFromTwoRequesters(t *testing.T) {
	gw := gatewaytest.Start(t, gatewaytest.Config())
	srv := testServer(t, nil)
	startBridge(t, gw, "ids", "srv", func(c *bridge.Config) { c.Server.Transport = inMemory(t, srv, nil) })
	alice, bob := bridgetest.Dial(t, gw.WS, "ids", "alice"), bridgetest.Dial(t, gw.WS, "ids", "bob")

	cx := json.RawMessage(`{"id": "task-1", "type": "task"}`)
	// alice's answer comes last: bob's request cannot take it.
	forAlice := alice.SendIn(cx, "srv", bridgetest.ToolCall(1, "echo", echoArgs{Message: "for alice", DelayMS: 300}))
	forBob := bob.Send("srv", bridgetest.ToolCall(1, "echo", echoArgs{Message: "for bob"}))
	withString := bob.Send("srv", bridgetest.ToolCall("1", "echo", echoArgs{Message: "string one"}))

	b := forBob.Await()
	if string(b.ID) != "1" || b.Text(t) != "for bob" || b.Envelope.Context != nil {
		t.Errorf("bob's answer: %s (context %s)", b.Envelope.Payload, b.Envelope.Context)
	}
	if s := withString.Await(); string(s.ID) != `"1"` || s.Text(t) != "string one" {
		t.Errorf("bob's answer to id \"1\": %s", s.Envelope.Payload)
	}
	a := forAlice.Await()
	if string(a.ID) != "1" || a.Text(t) != "for alice" {
		t.Errorf("alice's answer: %s", a.Envelope.Payload)
	}
	if ctxID := a.Envelope.ContextID(); ctxID != "task-1" || a.Envelope.Kind != wire.KindMCPResponse {
		t.Errorf("alice's answer is a %s in context %q (%s), want an mcp/response in task-1", a.Envelope.Kind, ctxID, a.Envelope.Context)
	}
}

// TestProgressGoesToTheCaller: the server's progress about a call goes to
// its requester alone, correlated to the request, with the requester's own
// token; then the answer.
func TestProgressGoesToTheCaller(t *testing.T) {
	gw := gatewaytest.Start(t, gatewaytest.Config())
	srv := testServer(t, nil)
	startBridge(t, gw, "progress", "srv", func(c *bridge.Config) { c.Server.Transport = inMemory(t, srv, nil) })
	alice := bridgetest.Dial(t, gw.WS, "progress", "alice")

	call := alice.Send("srv", `{"jsonrpc": "2.0", "id": 5, "method": "tools/call",
		"params": {"name": "progress", "arguments": {}, "_meta": {"progressToken": "alice-token"}}}`)
	for i := 1; i <= 2; i++ {
		select {
		case n := <-alice.Notes:
			var p struct {
				Method string
				Params struct {
					ProgressToken json.RawMessage
					Progress      float64
				}
			}
			_ = json.Unmarshal(n.Payload, &p)
			if p.Method != "notifications/progress" || string(p.Params.ProgressToken) != `"alice-token"` || p.Params.Progress != float64(i) ||
				len(n.To) != 1 || n.To[0] != "alice" || !n.CorrelationID.Has(call.ID) {
				t.Fatalf("progress %d: to %v, correlation_id %v, payload %s", i, n.To, n.CorrelationID, n.Payload)
			}
		case <-time.After(bridgetest.Wait):
			t.Fatalf("no progress %d", i)
		}
	}
	if a := call.Await(); a.Text(t) != "done" {
		t.Fatalf("the answer: %s", a.Envelope.Payload)
	}
}

// TestServerRequestsOfItsClient: a server (of a revision with requests of
// the client: 2025-11-25) that asks its client for sampling or roots gets
// method not found, as from a client that offers neither; its ping is
// answered.
func TestServerRequestsOfItsClient(t *testing.T) {
	gw := gatewaytest.Start(t, gatewaytest.Config())
	srv := testServer(t, nil)
	startBridge(t, gw, "asks", "srv", func(c *bridge.Config) {
		c.Server.Transport = inMemory(t, srv, nil)
		c.ProtocolVersion = "2025-11-25"
	})
	alice := bridgetest.Dial(t, gw.WS, "asks", "alice")

	got := alice.Call("srv", bridgetest.ToolCall(1, "ask_client", struct{}{})).Text(t)
	for _, method := range []string{"sampling/createMessage", "roots/list"} {
		if !strings.Contains(got, fmt.Sprintf("%s: calling %q: Method not found", method, method)) {
			t.Errorf("%s was not answered method not found:\n%s", method, got)
		}
	}
	if !strings.Contains(got, "ping: <nil>") {
		t.Errorf("ping was not answered:\n%s", got)
	}
}

// TestCapabilitiesDeclared: the bridge declares elicitation (form and URL)
// and nothing else, at initialize (2025-11-25) and in the _meta of each
// request (2026-07-28), so a server offers the tools that ask their user
// and none that need a model or folders; the revision is the newest the
// two share unless one is asked for.
func TestCapabilitiesDeclared(t *testing.T) {
	for _, version := range []string{"", "2025-11-25"} {
		t.Run("revision "+version, func(t *testing.T) {
			gw := gatewaytest.Start(t, gatewaytest.Config())
			srv := testServer(t, nil)
			var mu sync.Mutex
			var seen []string
			var client *mcp.InitializeParams
			srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
				return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
					if ss, ok := req.GetSession().(*mcp.ServerSession); ok && ss.InitializeParams() != nil {
						mu.Lock()
						seen = append(seen, method)
						client = ss.InitializeParams()
						mu.Unlock()
					}
					return next(ctx, method, req)
				}
			})
			startBridge(t, gw, "caps", "srv", func(c *bridge.Config) {
				c.Server.Transport = inMemory(t, srv, nil)
				c.ProtocolVersion = version
			})
			// The server sees who its client is with the first request
			// that carries it, which may come after the bridge is in the pod.
			wait.Until(t, 10*time.Second, "a request of the bridge's at the server", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return client != nil
			})
			mu.Lock()
			p, methods := client, strings.Join(seen, " ")
			mu.Unlock()
			want := "2026-07-28"
			if version != "" {
				want = version
			}
			if p == nil || p.ClientInfo == nil || p.ClientInfo.Name != bridge.ClientName || p.ProtocolVersion != want {
				t.Fatalf("the client the server saw: %+v (methods %s), want %s", p, methods, want)
			}
			if version == "" && strings.Contains(methods, "initialize") {
				t.Fatalf("a server of 2026-07-28 was sent %s", methods)
			}
			c := p.Capabilities
			if c == nil || c.Elicitation == nil || c.Elicitation.Form == nil || c.Elicitation.URL == nil {
				t.Fatalf("the bridge declared %+v, want elicitation in form and URL modes", c)
			}
			if c.Sampling != nil || c.RootsV2 != nil || c.Experimental != nil || c.Extensions != nil {
				t.Fatalf("the bridge declared %+v, want elicitation alone", c)
			}
		})
	}
}

// TestServerDown: the calls in flight when the server's connection ends
// are answered server_down, then the bridge starts the server again.
func TestServerDown(t *testing.T) {
	gw := gatewaytest.Start(t, gatewaytest.Config())
	started := make(chan context.Context, 4)
	srv := testServer(t, started)
	crashes := make(chan func(), 8)
	startBridge(t, gw, "down", "srv", func(c *bridge.Config) {
		c.Server.Transport = inMemory(t, srv, crashes)
		c.MinRestartDelay = 50 * time.Millisecond
	})
	crash := <-crashes
	alice := bridgetest.Dial(t, gw.WS, "down", "alice")

	blocked := alice.Send("srv", bridgetest.ToolCall(9, "block", struct{}{}))
	<-started
	crash()
	a := blocked.Await()
	if a.Error == nil || a.Error.Code != wire.RPCConnectionClosed || a.Reason() != wire.MCPReasonServerDown || string(a.ID) != "9" {
		t.Fatalf("the call in flight: %s, want error %d reason %s", a.Envelope.Payload, wire.RPCConnectionClosed, wire.MCPReasonServerDown)
	}
	<-crashes // the second start
	alice.AwaitUp("srv")
	if got := alice.Call("srv", bridgetest.ToolCall(10, "echo", echoArgs{Message: "again"})).Text(t); got != "again" {
		t.Fatalf("after the restart: %q", got)
	}
}

// TestTooManyInFlight: past MaxInFlight a request is answered at once
// with an error saying so; the calls in flight are not disturbed.
func TestTooManyInFlight(t *testing.T) {
	gw := gatewaytest.Start(t, gatewaytest.Config())
	started := make(chan context.Context, 4)
	srv := testServer(t, started)
	startBridge(t, gw, "bound", "srv", func(c *bridge.Config) {
		c.Server.Transport = inMemory(t, srv, nil)
		c.MaxInFlight = 2
	})
	alice := bridgetest.Dial(t, gw.WS, "bound", "alice")

	var blocked []*bridgetest.Pending
	for i := range 2 {
		blocked = append(blocked, alice.Send("srv", bridgetest.ToolCall(i, "block", struct{}{})))
		<-started
	}
	a := alice.Call("srv", bridgetest.ToolCall(2, "echo", echoArgs{Message: "one too many"}))
	if a.Error == nil || a.Error.Code != bridge.RPCTooManyInFlight || a.Reason() != bridge.ReasonTooManyInFlight {
		t.Fatalf("the third request: %s", a.Envelope.Payload)
	}
	// Cancelling one makes room: the server's handler sees the cancel.
	cancel := `{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 0, "reason": "changed my mind"}}`
	alice.Send("srv", cancel)
	if got := alice.Call("srv", bridgetest.ToolCall(3, "echo", echoArgs{Message: "room"})); got.Error != nil {
		t.Fatalf("after a cancel: %s", got.Envelope.Payload)
	}
	select {
	case env := <-blocked[0].Answers:
		t.Fatalf("the cancelled request was answered: %s", env.Payload)
	default:
	}
}

// TestTimeout: a call the server does not answer within RequestTimeout is
// answered with a timeout error, and cancelled at the server.
func TestTimeout(t *testing.T) {
	gw := gatewaytest.Start(t, gatewaytest.Config())
	started := make(chan context.Context, 4)
	srv := testServer(t, started)
	startBridge(t, gw, "timeout", "srv", func(c *bridge.Config) {
		c.Server.Transport = inMemory(t, srv, nil)
		c.RequestTimeout = 300 * time.Millisecond
	})
	alice := bridgetest.Dial(t, gw.WS, "timeout", "alice")

	slow := alice.Send("srv", bridgetest.ToolCall("slow", "block", struct{}{}))
	handler := <-started
	a := slow.Await()
	if a.Error == nil || a.Error.Code != wire.RPCRequestTimeout || a.Reason() != wire.MCPReasonTimeout {
		t.Fatalf("answer: %s", a.Envelope.Payload)
	}
	select {
	case <-handler.Done():
	case <-time.After(bridgetest.Wait):
		t.Fatal("the server's handler was not cancelled")
	}
}

// TestNotARequest: a payload that is not a JSON-RPC request is answered
// with invalid request, under its id when it has one.
func TestNotARequest(t *testing.T) {
	gw := gatewaytest.Start(t, gatewaytest.Config())
	srv := testServer(t, nil)
	startBridge(t, gw, "invalid", "srv", func(c *bridge.Config) { c.Server.Transport = inMemory(t, srv, nil) })
	alice := bridgetest.Dial(t, gw.WS, "invalid", "alice")

	for payload, wantID := range map[string]string{
		`{"jsonrpc": "2.0", "id": 4, "result": {}}`:        "4",    // an answer, not a request
		`{"jsonrpc": "1.0", "id": "a", "method": "ping"}`:  `"a"`,  // not JSON-RPC 2.0
		`{"jsonrpc": "2.0", "id": null, "method": "ping"}`: "null", // MCP ids are strings or numbers
	} {
		a := alice.Call("srv", payload)
		if a.Error == nil || a.Error.Code != jsonrpc.CodeInvalidRequest || string(a.ID) != wantID {
			t.Errorf("%s: answered %s, want invalid request with id %s", payload, a.Envelope.Payload, wantID)
		}
	}
	// A payload that is no JSON-RPC object at all is the gateway's to
	// refuse: it cannot tell whether an answer is due.
	if _, refusal := alice.Send("srv", `"ping"`).Outcome(); refusal == nil || refusal.Code != wire.CodeInvalidEnvelope {
		t.Errorf(`"ping": %v, want the gateway's invalid_envelope`, refusal)
	}
}

// TestManyAtOnce: requests in flight at once from several requesters are
// answered in any order, each once, to its own requester.
func TestManyAtOnce(t *testing.T) {
	gw := gatewaytest.Start(t, gatewaytest.Config())
	srv := testServer(t, nil)
	startBridge(t, gw, "many", "srv", func(c *bridge.Config) { c.Server.Transport = inMemory(t, srv, nil) })
	const requesters, each = 4, 25
	var wg sync.WaitGroup
	for r := range requesters {
		who := fmt.Sprintf("r%d", r)
		p := bridgetest.Dial(t, gw.WS, "many", who)
		wg.Add(1)
		go func() {
			defer wg.Done()
			calls := make([]*bridgetest.Pending, each)
			for i := range each {
				// Later requests answer sooner: the answers come out of order.
				calls[i] = p.Send("srv", bridgetest.ToolCall(i, "echo", echoArgs{Message: fmt.Sprintf("%s-%d", who, i), DelayMS: 10 * (each - i)}))
			}
			for i := range each {
				a := calls[i].Await()
				if got := a.Text(t); got != fmt.Sprintf("%s-%d", who, i) || string(a.ID) != fmt.Sprint(i) {
					t.Errorf("%s's request %d: %s", who, i, a.Envelope.Payload)
				}
			}
			// Nothing more: a second answer would have come by now on a
			// channel, or as one to no request.
			time.Sleep(100 * time.Millisecond)
			for i := range each {
				if len(calls[i].Answers) > 0 {
					t.Errorf("%s's request %d was answered twice", who, i)
				}
			}
			if stray := p.Stray(); len(stray) > 0 {
				t.Errorf("%s got %d answers to no request of its own", who, len(stray))
			}
		}()
	}
	wg.Wait()
}
