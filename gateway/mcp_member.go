package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpp/gateway/audit"
	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/filter"
	"github.com/mcpp/gateway/limits"
	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/pod"
	"github.com/mcpp/gateway/wire"
)

// mcpMember is one participant's presence in one pod through /mcp on this
// node: what docs/protocol.md section 9 calls its session. It begins with the
// participant's first request (or initialize) and ends when its last MCP
// session ends, when it has made no request for --mcp-session-timeout,
// when a newer member of the same id (a connection or a session, on any
// node) replaces it, or when the gateway shuts down. The MCP sessions of
// one participant share it: one presence, one filter, one cursor.
type mcpMember struct {
	e       *mcpEndpoint
	id, key string
	// caps and cred are those of the token of its latest request (a
	// client may present a fresh one at any request).
	caps    atomic.Pointer[capability.Set]
	cred    atomic.Pointer[participant.Credential]
	out     atomic.Bool // the pod took it out (replaced or kicked): it need not leave
	pod     *pod.Pod
	guest   pod.Guest
	buckets *limits.Buckets
	filter  atomic.Pointer[filter.Filter]
	ready   chan struct{} // closed once started (or failed to)
	done    chan struct{} // closed when it ends: waiting reads return
	// server serves the member's MCP sessions: the pod's tools, and the
	// tools of the pod's MCP servers it may call (mcp_servers.go).
	server *mcp.Server
	// tools are the servers' tools server lists now, by exposed name.
	toolsMu sync.Mutex
	tools   map[string]serverTool
	// listed are the servers' resources, templates and prompts server
	// lists now, and the resources its sessions subscribed to
	// (mcp_resources.go).
	listed memberLists
	// branches are the sub-contexts it opened with context_branch, the
	// newest last: its calls of servers' tools go in the newest still
	// open.
	branches []string

	// readMu serializes reads, which move the cursor: the sequence in the
	// pod's history up to which it has read.
	readMu sync.Mutex
	cursor uint64

	mu        sync.Mutex
	over      bool
	active    int       // requests being served: while any is, it is not idle
	idleSince time.Time // when the last request ended
	idle      *time.Timer
	sessions  map[*mcp.ServerSession]struct{}
	// knocks wakes the goroutine that notifies the member's subscribed
	// sessions of news in its inbox (listen); nil until one subscribes.
	knocks    chan struct{}
	inboxURIs map[string]struct{} // as its sessions subscribed to it
}

// Why a member ends, for the log.
const (
	endIdle     = "idle past --mcp-session-timeout"
	endSessions = "its MCP sessions ended"
	endReplaced = "replaced by a newer connection or session of the same participant"
	endShutdown = "the gateway is shutting down"
	endExpired  = "its token expired"
	endRevoked  = "its token was revoked"
)

// errSessionEnded answers a tool call of a member that has ended.
var errSessionEnded = &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
	Message: "this MCP session has ended (idle past --mcp-session-timeout, replaced by a newer connection or session of the same participant, kicked, its token expired or was revoked, or the gateway is shutting down): start a new session"}

// acquire returns the participant's member, started (joined to the pod)
// if it was not, and held for the request: release it when done.
func (e *mcpEndpoint) acquire(ctx context.Context, name string, who pod.Admitted, f *filter.Filter) (*mcpMember, *envelope.Error) {
	id := who.ID
	key := bucketKey(name, id)
	for {
		e.mu.Lock()
		select {
		case <-e.stopping:
			e.mu.Unlock()
			return nil, envelope.Errorf(wire.CodeShuttingDown, "the gateway is shutting down")
		default:
		}
		m, starting := e.members[key], false
		if m == nil {
			m = &mcpMember{e: e, id: id, key: key, ready: make(chan struct{}), done: make(chan struct{}),
				sessions: map[*mcp.ServerSession]struct{}{}}
			m.server = e.newServer()
			m.admit(who)
			m.filter.Store(f)
			e.members[key] = m
			starting = true
		} else {
			m.admit(who) // its token may be a fresh one
		}
		e.mu.Unlock()
		if starting {
			if refusal := m.start(ctx, name); refusal != nil {
				m.mu.Lock()
				m.over = true // others waiting for it start their own
				m.mu.Unlock()
				e.forget(m)
				close(m.done)
				close(m.ready)
				return nil, refusal
			}
			close(m.ready)
			// The lists of the pod's MCP servers, for its first tools/list.
			e.discover(m.pod)
			m.syncLists()
			select {
			case <-e.stopping:
				// The gateway began to drain as it started: shutdown left
				// it to us (it was not ready then).
				m.end(endShutdown)
			default:
			}
		}
		select {
		case <-m.ready:
		case <-ctx.Done():
			return nil, envelope.Errorf(wire.CodeOverCapacity, "the request ended while the participant was joining")
		}
		if m.hold() {
			return m, nil
		}
		// It ended (or failed to start) meanwhile: start another.
		e.mu.Lock()
		if e.members[key] == m {
			delete(e.members, key)
		}
		e.mu.Unlock()
	}
}

// start joins the pod as a guest. Like a WebSocket participant, it counts
// as a connection (--max-connections) and a participant of the pod
// (--max-participants-per-pod).
func (m *mcpMember) start(ctx context.Context, name string) *envelope.Error {
	g := m.e.g
	if n := g.connCount.Add(1); n > int64(g.cfg.MaxConnections) {
		g.connCount.Add(-1)
		return envelope.Errorf(wire.CodeOverCapacity, "the gateway has %d connections, the limit", g.cfg.MaxConnections)
	}
	m.guest = pod.NewGuest(wire.Identity{ID: m.id, Capabilities: m.caps.Load().Wire()}, func(why string) {
		m.out.Store(true)
		go m.end(why)
	})
	p, refusal := g.node.Enter(ctx, name, func(p *pod.Pod) (bool, *envelope.Error) {
		p.SyncMembers()
		p.Settle()
		// The first read returns what comes after the participant joined.
		dead, refusal, cursor := p.JoinGuest(m.guest)
		m.cursor = cursor
		return dead, refusal
	})
	if refusal != nil {
		// The pod is full, or the participant is banned (gateway/kick).
		g.connCount.Add(-1)
		return refusal
	}
	m.pod = p
	m.buckets = g.node.Buckets.Acquire(m.key)
	g.auditJoined(ctx, audit.TransportMCP, name)
	g.log.Debug("MCP participant joined", "pod", name, "participant", m.id)
	return nil
}

// admit takes the caps and credential of a request's token.
func (m *mcpMember) admit(who pod.Admitted) {
	m.caps.Store(who.Caps)
	cred := who.Credential
	if cred == nil {
		cred = &participant.Credential{}
	}
	m.cred.Store(cred)
}

// hold marks a request as being served, and reports false when the member
// has ended.
func (m *mcpMember) hold() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.over {
		return false
	}
	m.active++
	if m.idle != nil {
		m.idle.Stop()
	}
	return true
}

// release ends a request begun with hold; the member's idle time starts
// when no request is being served.
func (m *mcpMember) release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.active--
	if m.active > 0 || m.over {
		return
	}
	m.idleSince = time.Now()
	timeout := m.e.g.cfg.MCPSessionTimeout
	if m.idle == nil {
		m.idle = time.AfterFunc(timeout, m.expire)
	} else {
		m.idle.Reset(timeout)
	}
}

// expire ends the member when its idle timer fires, unless a request is
// being served or one came and went since the timer was set (a timer that
// fired as a request began is stale).
func (m *mcpMember) expire() {
	m.mu.Lock()
	if m.over || m.active > 0 {
		m.mu.Unlock()
		return
	}
	if left := m.e.g.cfg.MCPSessionTimeout - time.Since(m.idleSince); left > 0 {
		m.idle.Reset(left)
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	m.end(endIdle)
}

// attach adds an MCP session; it reports false when the member has ended.
func (m *mcpMember) attach(ss *mcp.ServerSession) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.over {
		return false
	}
	m.sessions[ss] = struct{}{}
	return true
}

// detach removes a session that closed (DELETE, or the SDK closed it); the
// member ends with its last session.
func (m *mcpMember) detach(ss *mcp.ServerSession) {
	m.mu.Lock()
	_, ok := m.sessions[ss]
	delete(m.sessions, ss)
	last := ok && len(m.sessions) == 0
	m.mu.Unlock()
	if last {
		m.end(endSessions)
	}
}

// ended reports whether the member has ended.
func (m *mcpMember) ended() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.over
}

// end leaves the pod (unless a newer member replaced this one: nobody is
// told then) and closes the member's MCP sessions, whose next requests
// the SDK answers with 404. It is idempotent, and must not be called from
// a request of one of those sessions (closing waits for them).
func (m *mcpMember) end(why string) {
	m.mu.Lock()
	if m.over {
		m.mu.Unlock()
		return
	}
	m.over = true
	close(m.done)
	if m.idle != nil {
		m.idle.Stop()
	}
	sessions := m.sessions
	m.sessions = nil
	m.mu.Unlock()

	e, g := m.e, m.e.g
	e.forget(m)
	if !m.out.Load() {
		reason := ""
		if why == endExpired || why == endRevoked {
			reason = why // others are told why it left; it did not choose to
		}
		m.pod.LeaveGuest(m.guest, reason)
	}
	if why != endShutdown {
		g.node.RemoveIdle(m.pod) // at shutdown the gateway closes every pod itself
	}
	g.node.Buckets.Release(m.key, time.Now())
	g.connCount.Add(-1)
	g.log.Debug("MCP participant left", "pod", m.pod.Name, "participant", m.id, "why", why)
	closeSessions := func() {
		for ss := range sessions {
			e.unbind(ss.ID())
			_ = ss.Close() // waits for the session's requests under way
		}
	}
	if why == endShutdown {
		// The drain goes on meanwhile: a request under way (a pod_send
		// waiting for the pod's log, say) ends on its own.
		go closeSessions()
		return
	}
	closeSessions()
}

// forget removes m from the endpoint's members.
func (e *mcpEndpoint) forget(m *mcpMember) {
	e.mu.Lock()
	if e.members[m.key] == m {
		delete(e.members, m.key)
	}
	e.mu.Unlock()
}

// endExpired ends the members whose token expired (the janitor's, every
// second); their next request is refused 401 with the claim.
func (e *mcpEndpoint) endExpired(now time.Time) {
	for _, m := range e.ready() {
		if exp := m.cred.Load().Expires; !exp.IsZero() && !now.Before(exp) {
			go m.end(endExpired)
		}
	}
}

// endRevoked ends the members whose token is no longer valid, and
// reports which.
func (e *mcpEndpoint) endRevoked() []audit.Member {
	var gone []audit.Member
	for _, m := range e.ready() {
		if c := m.cred.Load(); c.Revoked != nil && c.Revoked() {
			go m.end(endRevoked)
			gone = append(gone, audit.Member{Pod: m.pod.Name, Participant: m.id, Transport: audit.TransportMCP})
		}
	}
	return gone
}

// ready lists the members that have joined their pod.
func (e *mcpEndpoint) ready() []*mcpMember {
	e.mu.Lock()
	all := make([]*mcpMember, 0, len(e.members))
	for _, m := range e.members {
		all = append(all, m)
	}
	e.mu.Unlock()
	out := all[:0]
	for _, m := range all {
		select {
		case <-m.ready:
			if !m.ended() {
				out = append(out, m)
			}
		default:
		}
	}
	return out
}
