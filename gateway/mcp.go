package gateway

import (
	"context"
	"net/http"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpp/gateway/audit"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/filter"
	"github.com/mcpp/gateway/wire"
)

// The MCP endpoint (docs/protocol.md section 9): /mcp?pod=NAME is a Model
// Context Protocol server over Streamable HTTP, built on the official Go SDK,
// so that an LLM host or an IDE agent takes part in a pod with no client
// library. Each participant that uses it is a member of the pod with no
// connection (a guest, pod/members.go), and its tool calls act as that participant:
//
//	HTTP request → ServeHTTP: authenticate as /ws does, bind the MCP
//	  session to its participant, find or start the participant's mcpMember
//	  → the SDK's handler (with sessions, or without for 2026-07-28 clients)
//	  → middleware: the member into the context, refusals in the protocol's shape
//	  → a tool (mcp_tools.go): relays through ingress like /ws, or reads the
//	    pod's history through the member's cursor (mcp_read.go)
//
// One member per participant and pod on a node holds what its sessions
// share: presence, filter, rate buckets, the read cursor. Nothing is
// queued for it, so a member that never reads holds no more memory than
// one that does.

// mcpSessionHeader is the Streamable HTTP transport's session header.
const mcpSessionHeader = "Mcp-Session-Id"

// mcpStatelessVersion is the first MCP protocol version without sessions
// (SEP-2575): the SDK serves it only from a stateless handler.
const mcpStatelessVersion = "2026-07-28"

// mcpEndpoint is the /mcp handler and the state of its participants.
type mcpEndpoint struct {
	g      *Gateway
	server *mcp.Server
	// stateful serves the protocol versions with sessions (Mcp-Session-Id),
	// stateless the ones without; a client's MCP-Protocol-Version header
	// says which.
	stateful, stateless *mcp.StreamableHTTPHandler

	mu       sync.Mutex
	members  map[string]*mcpMember // by bucketKey(pod, id)
	sessions map[string]*mcpMember // by MCP session id
	stopping chan struct{}         // closed when the gateway shuts down
	// serverTools are the tools of the pods' MCP servers, by pod, for the
	// hosts of those pods on this node (mcp_servers.go).
	serverTools map[string]*podServerTools
	// rounds are the hosts' calls waiting for their next round
	// (mcp_calls.go).
	rounds hostCalls
}

// newMCPEndpoint builds the /mcp handler.
func newMCPEndpoint(g *Gateway) *mcpEndpoint {
	e := &mcpEndpoint{
		g: g, members: map[string]*mcpMember{}, sessions: map[string]*mcpMember{},
		stopping: make(chan struct{}), serverTools: map[string]*podServerTools{},
		rounds: hostCalls{calls: map[string]*hostCall{}},
	}
	// A request without a member (a GET or DELETE of a session, which
	// the SDK routes to the session's own server) gets the shared one.
	e.server = e.newServer()
	getServer := func(r *http.Request) *mcp.Server {
		if m := memberOf(r.Context()); m != nil {
			return m.server
		}
		return e.server
	}
	opts := mcp.StreamableHTTPOptions{
		// The JSON of one envelope may take --max-message-bytes; the
		// rest of a request is small.
		MaxRequestBodyBytes: int64(g.cfg.MaxMessageBytes) + 64<<10,
		// The SDK refuses a request that reaches a loopback address with
		// another Host (DNS rebinding: a web page that resolves its own
		// name to 127.0.0.1). That matters in open mode, where the page
		// would need no token; with tokens it would only refuse a reverse
		// proxy on the same machine that passes the public Host.
		DisableLocalhostProtection: g.verifier != nil,
	}
	e.stateful = mcp.NewStreamableHTTPHandler(getServer, &opts)
	stateless := opts
	stateless.Stateless = true
	e.stateless = mcp.NewStreamableHTTPHandler(getServer, &stateless)
	return e
}

// newServer builds an MCP server with the pod's tools and the inbox: one
// per member, whose sessions it serves, so that the tools of the pod's
// MCP servers it lists (mcp_servers.go) are the member's own, and a change
// to them notifies its sessions alone.
func (e *mcpEndpoint) newServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcpp-gateway", Title: "MCPP pod gateway", Version: Version()},
		&mcp.ServerOptions{
			Instructions: mcpInstructions,
			// No logging capability: the gateway sends no log messages.
			// The tools, resources and prompts change as the pod's MCP
			// servers come, go and change theirs (notifications/…/
			// list_changed); the inbox's template never does. What a host
			// listens for is its inbox (mcp_inbox.go) and the servers'
			// resources it subscribed to (mcp_subscriptions.go): with
			// sessions on the session's GET stream, which is not activity
			// (the participant still ends when idle); without, on a
			// subscriptions/listen request, which is a request under way
			// for as long as it listens.
			Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true},
				Resources:   &mcp.ResourceCapabilities{Subscribe: true, ListChanged: true},
				Prompts:     &mcp.PromptCapabilities{ListChanged: true},
				Completions: &mcp.CompletionCapabilities{}},
			SubscribeHandler:   e.subscribeAny,
			UnsubscribeHandler: e.unsubscribeAny,
			CompletionHandler:  e.complete,
		})
	s.AddReceivingMiddleware(e.traced, e.middleware)
	e.addTools(s)
	e.addProposalTools(s)
	e.addInbox(s)
	return s
}

// mcpInstructions tell the model what the server is for.
const mcpInstructions = `You are a participant of an MCPP pod: a room where agents and people exchange JSON envelopes. ` +
	`Read what others sent with pod_read (pass wait_ms to wait for something new) and older envelopes with pod_history. ` +
	`Send with pod_send. To think something through without flooding the pod, open a sub-context with context_branch, ` +
	`send your intermediate envelopes in it (pod_send with context set to its id), then close it with context_return and a summary: ` +
	`others who only follow conclusions see the summary, not the steps. pod_participants lists who is present, ` +
	`pod_contexts the pod's sub-contexts, pod_filter chooses what pod_read returns. ` +
	`The tools named PARTICIPANT__TOOL are the tools of the pod's MCP servers: calling one calls that participant's tool through the pod (in the sub-context you opened last, if one is open). ` +
	`Their prompts are named PARTICIPANT__PROMPT, and their resources have URIs mcpp://pods/POD/servers/PARTICIPANT/ followed by the server's own URI; getting or reading one goes through the pod the same way. ` +
	`A refused call has isError set and {"error": CODE, "message": TEXT}; retry only when "retryable" is true, after "retry_after_ms".`

// ServeHTTP authenticates the request as /ws does, then hands it to the
// SDK as the participant's.
func (e *mcpEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g := e.g
	if !g.accepting.Load() {
		g.refuse(w, envelope.Errorf(wire.CodeShuttingDown, "the gateway is shutting down"))
		return
	}
	if !g.originAllowed(r) {
		g.refuseJoin(w, r, audit.TransportMCP, r.URL.Query().Get("pod"), nobody, envelope.Errorf(wire.CodeForbidden,
			"origin %q may not connect (see --allowed-origins)", r.Header.Get("Origin")).Ruled(audit.RuleOrigin))
		return
	}
	if !g.cfg.historyOn() {
		g.refuse(w, envelope.Errorf(wire.CodeOverCapacity,
			"the MCP endpoint reads the pod's history, which this gateway does not keep (--history 0)"))
		return
	}
	q := r.URL.Query()
	pod := q.Get("pod")
	if !envelope.ValidPodName(pod) {
		g.refuse(w, envelope.Errorf(wire.CodeInvalidPod, "pod must be 1 to 64 characters of [A-Za-z0-9._-]: /mcp?pod=NAME"))
		return
	}
	who, refusal := g.authenticate(w, r, pod, false)
	if refusal != nil {
		g.refuseJoin(w, r, audit.TransportMCP, pod, who, refusal)
		return
	}
	f, err := filter.FromQuery(q)
	if err != nil {
		g.refuse(w, envelope.Errorf(wire.CodeInvalidFilter, "%s", err.(*filter.Error).Message))
		return
	}
	key := bucketKey(pod, who.ID)

	var m *mcpMember
	if sid := r.Header.Get(mcpSessionHeader); sid != "" {
		// A session is its creator's: a request that authenticates as
		// someone else (or in another pod) may not use it. A session id
		// this endpoint does not know is the SDK's to refuse (404: the
		// client starts a new session).
		m = e.session(sid)
		if m != nil && m.key != key {
			g.refuseJoin(w, r, audit.TransportMCP, pod, who, envelope.Errorf(wire.CodeForbidden,
				"this MCP session belongs to another participant; start a session of your own").Ruled(audit.RuleSessionOwner))
			return
		}
		switch {
		case r.Method != http.MethodPost:
			// A GET stream may stay open for hours and a DELETE ends the
			// session: only requests (POST) are activity.
			m = nil
		case m != nil && !m.hold():
			m = nil // it ended meanwhile: the SDK answers 404
		default:
			if m != nil {
				m.admit(who) // its token may be a fresh one
			}
		}
	} else if r.Method == http.MethodPost {
		// A new session, or a request of a protocol without sessions:
		// the participant is present from now on.
		if m, refusal = e.acquire(joining(r, who), pod, who, f); refusal != nil {
			g.refuseJoin(w, r, audit.TransportMCP, pod, who, refusal)
			return
		}
	}
	if m != nil {
		defer m.release()
		r = r.WithContext(context.WithValue(r.Context(), mcpMemberKey{}, m))
		if r.Method == http.MethodPost && e.peekTask(w, r, m) {
			return // a task of the pod's servers, which the SDK has not (mcp_tasks.go)
		}
	}
	if v := r.Header.Get("Mcp-Protocol-Version"); v >= mcpStatelessVersion {
		e.stateless.ServeHTTP(w, r)
		return
	}
	e.stateful.ServeHTTP(w, r)
}

// mcpMemberKey is the context key of the member a request acts as.
type mcpMemberKey struct{}

// memberOf is the member whose request ctx carries.
func memberOf(ctx context.Context) *mcpMember {
	m, _ := ctx.Value(mcpMemberKey{}).(*mcpMember)
	return m
}

// session is the member an MCP session belongs to, or nil.
func (e *mcpEndpoint) session(sid string) *mcpMember {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sessions[sid]
}

// middleware runs around every MCP method: the SDK's sessions find their
// member, a new session is bound to it, and a request that acts in the pod
// (a tool call; resources, prompts, completion) of a member that has ended
// is refused.
func (e *mcpEndpoint) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		m := memberOf(ctx)
		ss, _ := req.GetSession().(*mcp.ServerSession)
		if ss != nil && ss.ID() != "" {
			if bound := e.session(ss.ID()); bound != nil {
				m = bound
			} else if m != nil && method == "initialize" {
				e.bind(m, ss)
			}
		}
		if method != "tools/call" && !strings.HasPrefix(method, "resources/") && !strings.HasPrefix(method, "prompts/") && method != "completion/complete" {
			return next(ctx, method, req)
		}
		if m == nil || m.ended() {
			return nil, errSessionEnded
		}
		res, err := next(context.WithValue(ctx, mcpMemberKey{}, m), method, req)
		name := ""
		if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
			name = p.Name
		}
		if r, ok := res.(*mcp.CallToolResult); ok && err == nil && r.IsError && r.StructuredContent == nil && typedTool(name) {
			// The SDK refused the arguments before the tool ran: say it as
			// every other refusal is said.
			return refusalResult(refuse(envelope.Errorf(argumentsCode(name), "%s", toolErrorText(r)))), nil
		}
		return res, err
	}
}

// typedTool reports whether name is one of the gateway's tools whose
// arguments the SDK checks (addTool): not a tool of the pod's MCP servers
// (SERVER__TOOL) nor proposal_wait, whose error results are their own.
func typedTool(name string) bool {
	return !strings.Contains(name, "__") && name != "proposal_wait"
}

// bind makes ss one of m's sessions until it closes.
func (e *mcpEndpoint) bind(m *mcpMember, ss *mcp.ServerSession) {
	e.mu.Lock()
	e.sessions[ss.ID()] = m
	e.mu.Unlock()
	if !m.attach(ss) {
		e.unbind(ss.ID())
		go func() { _ = ss.Close() }() // not from within its own request
		return
	}
	go func() {
		_ = ss.Wait()
		e.unbind(ss.ID())
		m.detach(ss)
	}()
}

func (e *mcpEndpoint) unbind(sid string) {
	e.mu.Lock()
	delete(e.sessions, sid)
	e.mu.Unlock()
}

// shutdown ends every member when the gateway begins to drain, so that
// reads waiting for envelopes return at once and the participants leave
// while the WebSocket participants still hear of it; from then on new
// requests are answered 503 shutting_down and a tool call of an ended
// member a protocol error.
func (e *mcpEndpoint) shutdown() {
	e.mu.Lock()
	select {
	case <-e.stopping:
	default:
		close(e.stopping)
	}
	all := make([]*mcpMember, 0, len(e.members))
	for _, m := range e.members {
		all = append(all, m)
	}
	e.mu.Unlock()
	for _, m := range all {
		select {
		case <-m.ready:
			m.end(endShutdown)
		default:
			// Still joining: acquire ends it once it has joined.
		}
	}
}
