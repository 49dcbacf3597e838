package mcpendpoint

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpp/gateway/pod"
)

// Subscriptions to the resources of the pod's MCP servers
// (docs/protocol.md section 9). A host's resources/subscribe of a
// server's resource is its participant's mcp/request to the server
// (ask.go), so that capabilities govern it; the server then sends
// notifications/resources/updated to the pod, which every node hands to
// its hosts subscribed to that resource.
//
// The server's subscription is its client's, and its client (mcpp bridge)
// is one for the whole pod: the bridge counts who subscribes, by
// participant, and ends the server's subscription when nobody's is left.
// A participant's several sessions are one subscriber: a session's
// resources/unsubscribe goes to the server only when no other session of
// its participant is subscribed to the resource; otherwise the gateway
// answers it, and only that session stops hearing.

// resourceUpdated is the notification a server sends when a resource
// changed.
const resourceUpdated = "notifications/resources/updated"

// serverSub is a server's resource that sessions of a member subscribed
// to, under the URI they subscribed with.
type serverSub struct {
	server, uri string
	sessions    map[*mcp.ServerSession]struct{}
}

// subscribeAny is resources/subscribe: of a server's resource, or else of
// the inbox (subscribe).
func (e *Endpoint) subscribeAny(ctx context.Context, req *mcp.SubscribeRequest) error {
	m := memberOf(ctx)
	if m == nil || m.ended() {
		return errSessionEnded
	}
	server, uri, ok := m.serverResourceOf(req.Params.URI)
	if !ok {
		return e.subscribe(ctx, req)
	}
	if _, err := m.ask(ctx, server, "resources/subscribe", map[string]any{"uri": uri}); err != nil {
		return err
	}
	l := &m.listed
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.subs == nil {
		l.subs = map[string]*serverSub{}
	}
	s := l.subs[req.Params.URI]
	if s == nil {
		s = &serverSub{server: server, uri: uri, sessions: map[*mcp.ServerSession]struct{}{}}
		l.subs[req.Params.URI] = s
	}
	s.sessions[req.Session] = struct{}{}
	return nil
}

// unsubscribeAny is resources/unsubscribe: of a server's resource, or
// else of the inbox (unsubscribe).
func (e *Endpoint) unsubscribeAny(ctx context.Context, req *mcp.UnsubscribeRequest) error {
	m := memberOf(ctx)
	if m == nil {
		return errSessionEnded
	}
	server, uri, ok := m.serverResourceOf(req.Params.URI)
	if !ok {
		return e.unsubscribe(ctx, req)
	}
	if !m.stillSubscribed(req.Session, server, uri) {
		if _, err := m.ask(ctx, server, "resources/unsubscribe", map[string]any{"uri": uri}); err != nil {
			return err
		}
	}
	l := &m.listed
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.subs[req.Params.URI]; s != nil {
		delete(s.sessions, req.Session)
		if len(s.sessions) == 0 {
			delete(l.subs, req.Params.URI)
		}
	}
	return nil
}

// stillSubscribed reports whether a session of m other than ss is
// subscribed to uri of server and still open (a session of the protocol
// without sessions, which has no id, is subscribed while its
// subscriptions/listen lasts, and says when it ends).
func (m *member) stillSubscribed(ss *mcp.ServerSession, server, uri string) bool {
	var sessions []*mcp.ServerSession
	m.listed.mu.Lock()
	for _, s := range m.listed.subs {
		if s.server != server || s.uri != uri {
			continue
		}
		for o := range s.sessions {
			if o != ss {
				sessions = append(sessions, o)
			}
		}
	}
	m.listed.mu.Unlock()
	for _, o := range sessions {
		if o.ID() == "" || m.hasSession(o) {
			return true
		}
	}
	return false
}

// hasSession reports whether ss is one of the member's open sessions.
func (m *member) hasSession(ss *mcp.ServerSession) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.sessions[ss]
	return ok
}

// resourceUpdated tells the hosts of p on this node that are subscribed
// to uri of server that it changed: notifications/resources/updated with
// the URI each subscribed with (the SDK sends it to the sessions
// subscribed to it).
func (e *Endpoint) resourceUpdated(p *pod.Pod, server, uri string) {
	for _, m := range e.hosts(p.Name) {
		var uris []string
		m.listed.mu.Lock()
		for hostURI, s := range m.listed.subs {
			if s.server == server && s.uri == uri {
				uris = append(uris, hostURI)
			}
		}
		m.listed.mu.Unlock()
		for _, u := range uris {
			_ = m.server.ResourceUpdated(context.Background(), &mcp.ResourceUpdatedNotificationParams{URI: u})
		}
	}
}
