package bridge

import (
	"context"
	"encoding/json"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpp/gateway/wire"
)

// Subscriptions to the server's resources. The server has one client, the
// bridge, so a subscription is the bridge's: a resource is subscribed to
// at the server while at least one participant of the pod subscribes to
// it, and the server's notifications/resources/updated go to the pod (its
// MCP hosts' gateways pass them to the hosts subscribed). The bridge counts
// who subscribes: a participant's resources/unsubscribe ends its own
// subscription, and the server's only when nobody else's is left; a
// participant that leaves the pod ends its own; a server started again is
// subscribed again to what is still subscribed. In MCP 2026-07-28, which
// has no resources/subscribe, a resource is subscribed to with a
// subscriptions/listen stream of its own (resourceSubscriptions), as the
// SDK's client does, and unsubscribed by cancelling it.

// subscriptions are the resources subscribed to, by URI: who subscribes,
// and for a server of 2026-07-28 the number of its listen stream.
type subscriptions struct {
	mu     sync.Mutex
	byURI  map[string]*subscription
	server *session // the session the subscriptions were made on
}

type subscription struct {
	who    []string
	listen int64 // the listen stream's request number (2026-07-28), or 0
}

func newSubscriptions() *subscriptions { return &subscriptions{byURI: map[string]*subscription{}} }

// subscriptionRequest handles a requester's resources/subscribe or
// resources/unsubscribe; it reports false for any other request.
func (b *Bridge) subscriptionRequest(s *session, env *wire.Envelope, req request) bool {
	subscribe := *req.Method == "resources/subscribe"
	if !subscribe && *req.Method != "resources/unsubscribe" {
		return false
	}
	var p struct {
		URI string `json:"uri"`
	}
	if json.Unmarshal(req.Params, &p) != nil || p.URI == "" {
		b.reply(env, errorAnswer(req.ID, jsonrpc.CodeInvalidParams, *req.Method+" names the resource in params.uri", nil))
		return true
	}
	b.resubscribe(s)
	t := b.subs
	t.mu.Lock()
	sub := t.byURI[p.URI]
	first, last := false, false
	switch {
	case subscribe && sub == nil:
		sub, first = &subscription{}, true
		t.byURI[p.URI] = sub
		fallthrough
	case subscribe:
		if !slices.Contains(sub.who, env.From) {
			sub.who = append(sub.who, env.From)
		}
	case sub != nil:
		sub.who = slices.DeleteFunc(sub.who, func(w string) bool { return w == env.From })
		if len(sub.who) == 0 {
			last = true
			delete(t.byURI, p.URI)
		}
	}
	t.mu.Unlock()
	switch {
	case (first || last) && !s.modern:
		b.forward(s, env, req) // the server's own answer
		return true
	case first:
		b.serverSubscribe(s, p.URI, sub)
	case last:
		b.serverUnsubscribe(s, sub)
	}
	b.reply(env, serverAnswer(req.ID, &jsonrpc.Response{Result: json.RawMessage("{}")}))
	return true
}

// resubscribe subscribes session s, a new start of the server, to what is
// still subscribed in the pod; a session it was done for already is left
// as it is.
func (b *Bridge) resubscribe(s *session) {
	t := b.subs
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.server == s {
		return
	}
	t.server = s
	for uri, sub := range t.byURI {
		sub.listen = 0
		b.serverSubscribe(s, uri, sub)
	}
}

// serverSubscribe subscribes the server to uri: resources/subscribe, or
// a listen stream of its own. Call it with t.mu held, or with sub not yet
// shared.
func (b *Bridge) serverSubscribe(s *session, uri string, sub *subscription) {
	n := b.nextNumber()
	method, params := "resources/subscribe", encode(map[string]string{"uri": uri})
	if s.modern {
		sub.listen = n
		method, params = "subscriptions/listen", encode(map[string]any{"notifications": map[string]any{"resourceSubscriptions": []string{uri}}})
	}
	msg := &jsonrpc.Request{ID: serverID(n), Method: method, Params: s.withTriple(params)}
	go func() { _ = s.write(s.ctx, msg) }()
}

// serverUnsubscribe ends the server's subscription sub: a 2026-07-28
// server's listen stream is cancelled.
func (b *Bridge) serverUnsubscribe(s *session, sub *subscription) {
	if sub.listen == 0 {
		return
	}
	msg := &jsonrpc.Request{Method: "notifications/cancelled", Params: encode(map[string]any{"requestId": sub.listen, "reason": "nobody in the pod subscribes any more"})}
	go func() {
		ctx, cancel := context.WithTimeout(s.ctx, b.cfg.PingTimeout)
		defer cancel()
		_ = s.write(ctx, msg)
	}()
}

// left ends the subscriptions of a participant that left the pod.
func (b *Bridge) left(id string) {
	t := b.subs
	s := b.current.Load()
	t.mu.Lock()
	defer t.mu.Unlock()
	for uri, sub := range t.byURI {
		if !slices.Contains(sub.who, id) {
			continue
		}
		sub.who = slices.DeleteFunc(sub.who, func(w string) bool { return w == id })
		if len(sub.who) > 0 {
			continue
		}
		delete(t.byURI, uri)
		if s == nil || s != t.server {
			continue
		}
		if s.modern {
			b.serverUnsubscribe(s, sub)
		} else {
			msg := &jsonrpc.Request{ID: serverID(b.nextNumber()), Method: "resources/unsubscribe", Params: encode(map[string]string{"uri": uri})}
			go func() { _ = s.write(s.ctx, msg) }()
		}
	}
}
