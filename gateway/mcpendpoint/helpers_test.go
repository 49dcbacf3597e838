package mcpendpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/filter"
	"github.com/mcpp/gateway/history"
	"github.com/mcpp/gateway/limits"
	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/pod"
	"github.com/mcpp/gateway/wire"
)

// The endpoint's unit tests run it on an in-process pod, with no gateway
// and no NATS: a pod.Node alone (its history in memory, history.Memory),
// the endpoint over httptest as the gateway mounts it, the Gateway's
// funcs filled by the test (testPod). The hosts are the official SDK's
// clients over Streamable HTTP. A pod's MCP server is a real participant
// (serves=mcp) on a real WebSocket, whose other end relays the pod's
// mcp/requests to an SDK server over the SDK's in-memory transport and
// its answers back, as mcpp bridge relays them to a server process.

// testPodName is the pod the tests' hosts and servers are in.
const testPodName = "lab"

// testPod is a node, its endpoint, and the capabilities each participant
// is admitted with (open mode's ?participant=, with caps of the test's).
type testPod struct {
	t    *testing.T
	node *pod.Node
	e    *Endpoint
	url  string

	mu   sync.Mutex
	caps map[string][]wire.Capability
	pods map[string]*pod.Pod
}

// newTestPod starts a node and its endpoint; tune, if any, changes its
// limits first.
func newTestPod(t *testing.T, tune ...func(*pod.Config)) *testPod {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rate := limits.Rate{Per: 1e6, Burst: 1e6}
	node := &pod.Node{
		ID: "node-a",
		Config: pod.Config{
			Config: limits.Config{
				MaxMessageBytes: 1 << 20, MaxContextBytes: 1 << 20,
				Contexts: limits.Contexts{
					MaxDepth: 5, ContextTimeout: time.Minute, ContextRetention: time.Minute,
					ConclusionKinds:   wire.KindConclusion,
					MaxContextsPerPod: 1000, MaxContextsPerParticipant: 100,
					ContextRate: rate.Per, ContextBurst: rate.Burst,
				},
				Rate: rate.Per, Burst: rate.Burst,
				MaxParticipantsPerPod: 100, History: 1000, HistoryAge: time.Hour,
				Calls: limits.Calls{MCPRequestTimeout: 20 * time.Second, MaxMCPRequestsPerParticipant: 100, MaxMCPRequestsPerPod: 1000,
					ProposalTimeout: time.Minute, MaxProposalsPerParticipant: 100, MaxProposalsPerPod: 1000},
			},
			FlightBytes: 64 << 20,
		},
		Log:     log,
		Metrics: pod.NewMetrics(),
		Traces:  pod.NewTraces(nil),
		Buckets: limits.NewBucketSet(rate, rate),
	}
	for _, f := range tune {
		f(&node.Config)
	}
	mem := history.NewMemory(1000 + history.Slack)
	node.History = mem
	node.Writer = history.NewWriter(mem, history.WriterOptions{Node: node.ID, Logger: log})
	t.Cleanup(node.Writer.Close)
	node.Start()
	t.Cleanup(node.Stop)

	tp := &testPod{t: t, node: node, caps: map[string][]wire.Capability{}, pods: map[string]*pod.Pod{}}
	tp.e = New(Gateway{
		Node: node, SessionTimeout: time.Minute, Version: "test", NodeID: node.ID, Log: log,
		Admit: tp.admit, Refuse: tp.refuse, Join: tp.join, Left: func(*pod.Pod, bool) {},
	})
	node.OnServers = tp.e.ServersChanged
	srv := httptest.NewServer(tp.e)
	tp.url = srv.URL
	t.Cleanup(func() {
		tp.e.Shutdown()
		srv.Close()
		tp.mu.Lock()
		defer tp.mu.Unlock()
		for _, p := range tp.pods {
			p.Close()
		}
	})
	return tp
}

// admit is the test's Gateway.Admit: open mode, each participant with the
// capabilities the test gave it (none: refused, as a bad token is).
func (tp *testPod) admit(w http.ResponseWriter, r *http.Request) (Admission, bool) {
	q := r.URL.Query()
	id := q.Get("participant")
	tp.mu.Lock()
	caps, ok := tp.caps[id]
	tp.mu.Unlock()
	if !ok {
		writeRefusal(w, envelope.Errorf(wire.CodeUnauthorized, "the test admits no participant %q", id))
		return Admission{}, false
	}
	f, err := filter.FromQuery(q)
	if err != nil {
		writeRefusal(w, envelope.Errorf(wire.CodeInvalidFilter, "%s", err.(*filter.Error).Message))
		return Admission{}, false
	}
	who := pod.Admitted{ID: id, Caps: capability.MustCompile(caps), Credential: &participant.Credential{}}
	return Admission{Pod: q.Get("pod"), Who: who, Filter: f}, true
}

func (tp *testPod) refuse(w http.ResponseWriter, _ *http.Request, _ Admission, e *envelope.Error) {
	writeRefusal(w, e)
}

func writeRefusal(w http.ResponseWriter, e *envelope.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Code.HTTPStatus())
	_ = json.NewEncoder(w).Encode(wire.Refusal{Code: e.Code, Message: e.Message})
}

// join is the test's Gateway.Join: the pod of the test's table, the
// guest joined to it.
func (tp *testPod) join(_ context.Context, _ *http.Request, a Admission, guest pod.Guest) (*pod.Pod, uint64, *envelope.Error) {
	p := tp.pod(a.Pod)
	p.Settle()
	dead, refusal, cursor := p.JoinGuest(guest)
	if dead {
		return nil, 0, envelope.Errorf(wire.CodeOverCapacity, "pod %q died", a.Pod)
	}
	if refusal != nil {
		return nil, 0, refusal
	}
	return p, cursor, nil
}

// pod is the pod of the test's table, opened and ready.
func (tp *testPod) pod(name string) *pod.Pod {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if p := tp.pods[name]; p != nil {
		return p
	}
	p := pod.New(tp.node, name)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.WaitReady(ctx); err != nil {
		tp.t.Fatalf("pod %s: %v", name, err)
	}
	tp.pods[name] = p
	return p
}

// admitAs lets id in with caps.
func (tp *testPod) admitAs(id string, caps []wire.Capability) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.caps[id] = caps
}

// The MCP revisions a host speaks: the SDK's client, left to itself,
// speaks the newest, which has no sessions; sessionsVersion is the last
// with them (Mcp-Session-Id).
const (
	newestVersion   = ""
	sessionsVersion = "2025-11-25"
)

// host connects an MCP host to the pod as id, with caps, speaking MCP
// version (newestVersion or sessionsVersion).
func (tp *testPod) host(id string, caps []wire.Capability, version string) *mcp.ClientSession {
	tp.t.Helper()
	tp.admitAs(id, caps)
	c := mcp.NewClient(&mcp.Implementation{Name: "test-host-" + id, Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	endpoint := tp.url + "/mcp?" + url.Values{"pod": {testPodName}, "participant": {id}}.Encode()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		tp.t.Fatalf("host %s: %v", id, err)
	}
	tp.t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// capsJSON reads capabilities written as a token file writes them.
func capsJSON(t *testing.T, s string) []wire.Capability {
	t.Helper()
	var caps []wire.Capability
	if err := json.Unmarshal([]byte(s), &caps); err != nil {
		t.Fatal(err)
	}
	return caps
}

// toolServer is an MCP server of the pod: a participant that serves mcp,
// relaying to an SDK server.
type toolServer struct {
	id string
	// calls are the tools/call envelopes it received, as the pod
	// delivered them.
	calls chan map[string]any
}

// serverCaps are a tool server's: it answers and notifies.
var serverCaps = wire.Kinds(wire.KindMCPResponse+"*", wire.KindMCPNotification)

// toolServer joins id to the pod as an MCP server whose tools are s's.
func (tp *testPod) toolServer(id string, s *mcp.Server) *toolServer {
	t := tp.t
	t.Helper()
	p := tp.pod(testPodName)
	f, err := filter.FromQuery(url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	joined := make(chan *participant.Participant, 1)
	ws := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hw := participant.SmallBuffers(w)
		c, err := websocket.Accept(hw, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		joined <- participant.New(c, hw.Conn(), id, p.Name, capability.MustCompile(serverCaps), nil, wire.ProtocolMCPP, f,
			participant.Options{SendQueue: 1 << 10, SendQueueBytes: 16 << 20, WriteTimeout: 10 * time.Second, Serves: []string{wire.ServesMCP}})
	}))
	t.Cleanup(ws.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ws.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetReadLimit(-1)
	t.Cleanup(func() { _ = conn.CloseNow() })
	r := <-joined

	// The SDK server, and the relay's end of it, introduced as a client
	// introduces itself.
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	mc, err := ct.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mc.Close() })
	initID, _ := jsonrpc.MakeID("relay-init")
	params, _ := json.Marshal(map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "test-relay", "version": "1"}})
	if err := mc.Write(ctx, &jsonrpc.Request{ID: initID, Method: "initialize", Params: params}); err != nil {
		t.Fatal(err)
	}
	if msg, err := mc.Read(ctx); err != nil {
		t.Fatal(err)
	} else if res, ok := msg.(*jsonrpc.Response); !ok || res.Error != nil {
		t.Fatalf("the SDK server's initialize: %#v", msg)
	}
	if err := mc.Write(ctx, &jsonrpc.Request{Method: "notifications/initialized", Params: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}

	// Only now is it in the pod: the pod asks it for its lists at once.
	if dead, refusal := p.Reserve(id, false); dead || refusal != nil {
		t.Fatalf("%s: the pod refused the join: %v", id, refusal)
	}
	p.Join(r, pod.HistoryWant{})
	ts := &toolServer{id: id, calls: make(chan map[string]any, 64)}
	send := func(env map[string]any) {
		b, _ := json.Marshal(env)
		p.Handle(&pod.Sender{ID: id, Protocol: wire.ProtocolMCPP, Conn: r, Reply: pod.ReplyTo(r), Buckets: tp.node.Buckets.Acquire(limits.BucketKey(p.Name, id))}, nil, b, false)
	}
	// requesters are the envelopes of the requests the server is
	// answering, by JSON-RPC id.
	var reqMu sync.Mutex
	requesters := map[string][2]string{}
	go func() { // the pod → the server
		for {
			_, b, err := conn.Read(ctx)
			if err != nil {
				return
			}
			var env map[string]any
			if err := json.Unmarshal(b, &env); err != nil {
				t.Errorf("%s received what is not JSON: %q", id, b)
				return
			}
			kind, _ := env["kind"].(string)
			to, _ := env["to"].([]any)
			if !slices.Contains(to, any(id)) {
				continue // the pod shows everyone what others are asked (routing all)
			}
			if kind == wire.KindError {
				t.Errorf("%s was refused: %s", id, b)
				continue
			}
			if !wire.IsMCPRequest(kind) {
				continue
			}
			payload, _ := json.Marshal(env["payload"])
			msg, err := jsonrpc.DecodeMessage(payload)
			if err != nil {
				t.Errorf("%s received a request that is not JSON-RPC: %s", id, payload)
				continue
			}
			if req, ok := msg.(*jsonrpc.Request); ok && req.ID.IsValid() {
				reqMu.Lock()
				requesters[fmt.Sprint(req.ID.Raw())] = [2]string{env["id"].(string), env["from"].(string)}
				reqMu.Unlock()
				if req.Method == "tools/call" {
					ts.calls <- env
				}
			}
			if err := mc.Write(ctx, msg); err != nil {
				return
			}
		}
	}()
	go func() { // the server → the pod
		for {
			msg, err := mc.Read(ctx)
			if err != nil {
				return
			}
			b, _ := jsonrpc.EncodeMessage(msg)
			switch m := msg.(type) {
			case *jsonrpc.Response:
				key := fmt.Sprint(m.ID.Raw())
				reqMu.Lock()
				env, ok := requesters[key]
				delete(requesters, key)
				reqMu.Unlock()
				if ok {
					send(map[string]any{"kind": wire.KindMCPResponse, "to": []string{env[1]}, "correlation_id": env[0], "payload": json.RawMessage(b)})
				}
			case *jsonrpc.Request:
				if !m.ID.IsValid() { // a notification: list_changed, to everyone
					send(map[string]any{"kind": wire.KindMCPNotification, "payload": json.RawMessage(b)})
				}
			}
		}
	}()
	return ts
}

// nextCall is the next tools/call the server received.
func (ts *toolServer) nextCall(t *testing.T) map[string]any {
	t.Helper()
	select {
	case env := <-ts.calls:
		return env
	case <-time.After(10 * time.Second):
		t.Fatalf("%s received no call within 10s", ts.id)
	}
	return nil
}

// echoServer is an SDK server with an echo tool and the tools named in
// extra, each answering its name (but fail, which answers an error).
func echoServer(extra ...string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "echo-server", Version: "1"}, nil)
	type echoArgs struct {
		Message string `json:"message"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echoes the message."},
		func(_ context.Context, _ *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Echo: " + a.Message}}}, nil, nil
		})
	for _, name := range extra {
		s.AddTool(&mcp.Tool{Name: name, Description: "Says its name.", InputSchema: json.RawMessage(`{"type": "object"}`)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				if name == "fail" {
					return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "failed on purpose"}}}, nil
				}
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "I am " + name}}}, nil
			})
	}
	return s
}

// toolNames lists the host's tools.
func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	return names
}

// serverToolNames are the host's tools of the pod's servers (SERVER__TOOL).
func serverToolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	var out []string
	for _, n := range toolNames(t, cs) {
		if strings.Contains(n, "__") {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// serverToolsAre waits until the host lists want (sorted) of the servers'
// tools, and fails with what it lists after 10s. A host's first list has
// what the node read of the servers within joinDiscovery; a slower
// server's tools come later, with a list change.
func serverToolsAre(t *testing.T, cs *mcp.ClientSession, want []string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := serverToolNames(t, cs)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the host lists %v, want %v", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// call calls a tool of the host.
func call(t *testing.T, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// textOf is the text of a result's content.
func textOf(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}
