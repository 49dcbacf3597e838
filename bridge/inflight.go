package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// call is one request of a requester that the bridge sent to its server
// and that is waiting for the answer.
type call struct {
	n         int64           // the bridge's number: its JSON-RPC id at the server
	first     int64           // its first number, which its progress token is
	requester string          // who asked: the mcp/request's from
	envID     string          // the mcp/request's id: the answer's correlation_id
	kind      string          // the mcp/request's kind, for the answer's (MCPx's long forms)
	context   json.RawMessage // the mcp/request's context: the answer goes in it too
	id        json.RawMessage // the requester's JSON-RPC id, put back in the answer
	token     json.RawMessage // the requester's progress token, or nil
	method    string
	// params are the params sent to the server (the progress token the
	// bridge's, the _meta triple of a modern session): a call that
	// needs input (inputs.go) is sent again with them and the answers.
	params json.RawMessage
	// task is the task a tasks/… request names; augmented says the call
	// asked for a task (params.task): its answer names the task made.
	task      string
	augmented bool
	rounds    int           // the times it was sent again with input (inputs.go)
	sess      *session      // the server's connection it was sent on
	timer     *time.Timer   // answers it with a timeout
	sent      chan struct{} // closed once its write to the server is over
	// stop ends the context of its write, which for Streamable HTTP is
	// also the reading of the answer's stream: it lasts as long as the
	// call is in flight.
	stop context.CancelFunc
	// span is the bridge's span of the call (tracing.go).
	span trace.Span
}

// inflight is the table of the calls waiting for their answer. Each call
// leaves it exactly once, by whichever comes first: the server's answer,
// the failure of its write, its session's end, its timeout, the
// requester's cancel. Whoever takes it out answers it (or,
// for a cancel, knows it needs no answer), so that every request is
// answered once.
type inflight struct {
	mu    sync.Mutex
	max   int
	calls map[int64]*call
	ids   map[string]*call // by requester and JSON-RPC id
}

func newInflight(max int) *inflight {
	return &inflight{max: max, calls: map[int64]*call{}, ids: map[string]*call{}}
}

var (
	errFull      = errors.New("too many requests in flight")
	errDuplicate = errors.New("a request with this id is already in flight")
	errDown      = errors.New("the server's connection ended")
)

func requesterKey(requester string, id json.RawMessage) string {
	return requester + "\x00" + idKey(id)
}

// add puts c in the table, unless the table is full, the requester
// already waits for a request of the same id, or c's session has ended:
// a session's end takes out every call of the session (failCalls), and
// a call added after that would wait for nothing.
func (t *inflight) add(c *call) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.sess.ended() {
		return errDown
	}
	if len(t.calls) >= t.max {
		return errFull
	}
	k := requesterKey(c.requester, c.id)
	if _, ok := t.ids[k]; ok {
		return errDuplicate
	}
	t.calls[c.n] = c
	t.ids[k] = c
	return nil
}

// take takes out the call of number n, or returns nil when it has left.
func (t *inflight) take(n int64) *call {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.calls[n]
	if c != nil {
		t.removeLocked(c)
	}
	return c
}

// takeByRequester takes out the call of requester whose JSON-RPC id is id.
func (t *inflight) takeByRequester(requester string, id json.RawMessage) *call {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.ids[requesterKey(requester, id)]
	if c != nil {
		t.removeLocked(c)
	}
	return c
}

// renumber gives c, in the table, the number n, and stop to end its
// next write: a call sent again (with the input its server asked for) is
// a new request at the server. It reports false when c left meanwhile
// (cancelled, timed out).
func (t *inflight) renumber(c *call, n int64, stop context.CancelFunc) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.calls[c.n] != c {
		return false
	}
	delete(t.calls, c.n)
	c.n = n
	t.calls[n] = c
	if c.stop != nil {
		c.stop() // the answer to the last sending has come
	}
	c.stop = stop
	return true
}

// byProgress returns the call whose progress token is the bridge's
// token n (its number when it was first sent), without taking it out.
func (t *inflight) byProgress(n int64) *call {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.calls[n]; c != nil && c.first == n {
		return c
	}
	for _, c := range t.calls {
		if c.first == n {
			return c
		}
	}
	return nil
}

// ofSession lists the calls in flight on session s.
func (t *inflight) ofSession(s *session) []*call {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*call
	for _, c := range t.calls {
		if c.sess == s {
			out = append(out, c)
		}
	}
	return out
}

// get returns the call of number n without taking it out (for its
// progress notifications).
func (t *inflight) get(n int64) *call {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.calls[n]
}

// takeAll takes out every call keep selects.
func (t *inflight) takeAll(keep func(*call) bool) []*call {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*call
	for _, c := range t.calls {
		if keep(c) {
			t.removeLocked(c)
			out = append(out, c)
		}
	}
	return out
}

func (t *inflight) removeLocked(c *call) {
	delete(t.calls, c.n)
	delete(t.ids, requesterKey(c.requester, c.id))
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.stop != nil {
		c.stop()
	}
}
