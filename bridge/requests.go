package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpp/gateway/wire"
)

// cancelWait bounds how long a requester's notifications/cancelled waits
// for its request to have been written to the server, so that the
// server never reads a cancel before the request it cancels.
const cancelWait = 5 * time.Second

// received handles an envelope of the pod: an mcp/request addressed to
// the bridge is passed on to the server, an mcp/response addressed to it
// answers one of its questions (questions.go); anything else is not the
// bridge's business.
func (b *Bridge) received(env *wire.Envelope) {
	if env.From == b.self || !slices.Contains(env.To, b.self) {
		return
	}
	if wire.IsMCPResponse(env.Kind) {
		b.answeredQuestion(env)
		return
	}
	if !wire.IsMCPRequest(env.Kind) {
		return
	}
	req, err := parseRequest(env.Payload)
	if err != nil {
		// JSON-RPC answers an unreadable request with its id, or null when
		// it has none: a notification gets no answer, but a payload that is
		// not a request at all is not one.
		b.reply(env, errorAnswer(req.ID, jsonrpc.CodeInvalidRequest, err.Error(), nil))
		return
	}
	if req.ID == nil {
		b.notification(env, req)
		return
	}
	s := b.current.Load()
	if s == nil {
		b.reply(env, serverDownAnswer(req.ID))
		return
	}
	if *req.Method == "ping" && s.modern {
		// MCP 2026-07-28 has no ping: the bridge answers it while the
		// server is up, which is what a requester asks.
		b.reply(env, serverAnswer(req.ID, &jsonrpc.Response{Result: json.RawMessage("{}")}))
		return
	}
	if *req.Method == "initialize" {
		// The bridge made the handshake; a requester who asks for it gets
		// what the server answered then (its revision, capabilities and
		// instructions; for a server of MCP 2026-07-28, what its
		// server/discover said, in initialize's shape).
		b.reply(env, serverAnswer(req.ID, &jsonrpc.Response{Result: s.initResult}))
		return
	}
	if b.subscriptionRequest(s, env, req) {
		return
	}
	if !b.tasks.mayAsk(env.From, *req.Method, req.Params) {
		b.reply(env, errorAnswer(req.ID, jsonrpc.CodeInvalidParams, "no task of yours with this taskId is known at this MCP server", nil))
		return
	}
	b.forward(s, env, req)
}

// forward sends a requester's request to the server under a number of
// the bridge's.
func (b *Bridge) forward(s *session, env *wire.Envelope, req request) {
	n := b.nextNumber()
	c := &call{
		n: n, first: n, requester: env.From, envID: env.ID, kind: env.Kind, context: env.Context,
		id: req.ID, method: *req.Method, sess: s, sent: make(chan struct{}),
	}
	params := req.Params
	params, c.token = swapProgressToken(params, numberToken(n))
	params = b.startCall(c, env, params) // the server continues the call's span
	c.params = s.withTriple(params)
	c.augmented = member(params, "task") != nil
	if isTaskRequest(c.method) {
		_ = json.Unmarshal(member(params, "taskId"), &c.task)
	}
	ctx, stop := context.WithCancel(s.ctx)
	c.stop = stop
	c.timer = time.AfterFunc(b.cfg.RequestTimeout, func() { b.timedOut(c) })
	if err := b.calls.add(c); err != nil {
		c.timer.Stop()
		stop()
		endCall(c, nil, "refused")
		switch {
		case errors.Is(err, errFull):
			b.reply(env, errorAnswer(req.ID, RPCTooManyInFlight,
				fmt.Sprintf("mcpp bridge already has %d requests in flight at its MCP server; try again when some are answered", b.cfg.MaxInFlight),
				tooManyData{Reason: ReasonTooManyInFlight, Limit: b.cfg.MaxInFlight}))
		case errors.Is(err, errDuplicate):
			b.reply(env, errorAnswer(req.ID, jsonrpc.CodeInvalidRequest, "you already have a request with this id in flight at this MCP server", nil))
		default:
			b.reply(env, serverDownAnswer(req.ID))
		}
		return
	}
	go func() {
		defer close(c.sent)
		b.send(ctx, c, n, c.params)
	}()
}

// send writes call c to the server as request number n, and answers it
// when the write fails.
func (b *Bridge) send(ctx context.Context, c *call, n int64, params json.RawMessage) {
	err := c.sess.write(ctx, &jsonrpc.Request{ID: serverID(n), Method: c.method, Params: params})
	if err == nil {
		return
	}
	if b.calls.take(n) != c {
		return // answered meanwhile (a timeout), or the session's end answers it
	}
	b.endQuestions(c)
	var r *refusal
	switch {
	case errors.As(err, &r) && r.rpc != nil:
		b.answer(c, serverAnswer(c.id, &jsonrpc.Response{Error: r.rpc}))
	case errors.As(err, &r):
		b.answer(c, errorAnswer(c.id, jsonrpc.CodeInvalidRequest, "the MCP server refused the request: "+r.Error(), nil))
	default:
		b.answer(c, serverDownAnswer(c.id))
	}
}

// notification passes a requester's notification on to the server,
// except those that are the bridge's own business: notifications/
// initialized (the bridge made the handshake) and notifications/cancelled,
// whose request id is put into the bridge's.
func (b *Bridge) notification(env *wire.Envelope, req request) {
	s := b.current.Load()
	if s == nil {
		return // nobody to tell; a notification has no answer to carry an error
	}
	switch *req.Method {
	case "notifications/initialized":
		return
	case "notifications/cancelled":
		c := b.calls.takeByRequester(env.From, member(req.Params, "requestId"))
		if c == nil {
			return // answered already, or never made
		}
		endCall(c, nil, "cancelled")
		b.endQuestions(c)
		go func() {
			select {
			case <-c.sent:
			case <-time.After(cancelWait):
			}
			b.writeCancel(c, req.Params)
		}()
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(s.ctx, b.cfg.RequestTimeout)
		defer cancel()
		_ = s.write(ctx, &jsonrpc.Request{Method: *req.Method, Params: req.Params})
	}()
}

// writeCancel tells the server that the bridge no longer waits for c's
// answer; params are the cancel's (its reason), with c's number as the
// request's id.
func (b *Bridge) writeCancel(c *call, params json.RawMessage) {
	ctx, cancel := context.WithTimeout(c.sess.ctx, b.cfg.PingTimeout)
	defer cancel()
	_ = c.sess.write(ctx, &jsonrpc.Request{
		Method: "notifications/cancelled",
		Params: withMember(params, "requestId", numberToken(c.n)),
	})
}

// The answer to a call, from the server: it leaves the table, its
// questions end, and, unless the server needs input first (inputs.go),
// it goes to its requester.

// answered takes the server's answer to call n to its requester. An
// answer to a call that has left (it timed out, or was cancelled) is
// dropped. An error that is not a JSON-RPC error did not come from the
// server: the SDK's Streamable HTTP transport makes one up for a call
// whose stream ended without its answer, as when the server is killed
// in the middle of it; the requester learns that the server went down.
func (b *Bridge) answered(n int64, resp *jsonrpc.Response) {
	c := b.calls.get(n)
	if c == nil {
		return
	}
	if resp.Error == nil && c.sess.modern && b.needsInput(c, n, resp.Result) {
		return // it goes on once its requester answered (inputs.go)
	}
	if b.calls.take(n) != c {
		return
	}
	b.endQuestions(c)
	if we := (*jsonrpc.Error)(nil); resp.Error != nil && !errors.As(resp.Error, &we) {
		b.answer(c, serverDownAnswer(c.id))
		return
	}
	if resp.Error == nil {
		switch {
		case c.augmented:
			b.tasks.made(c.requester, resp.Result)
		case c.method == "tasks/list":
			resp = &jsonrpc.Response{Result: b.tasks.ownList(c.requester, resp.Result)}
		}
	}
	b.answer(c, serverAnswer(c.id, resp))
}

// timedOut answers call c with a timeout error, when it is still in
// flight, and cancels it at the server.
func (b *Bridge) timedOut(c *call) {
	if b.calls.take(c.n) != c {
		return
	}
	b.endQuestions(c)
	d := b.cfg.RequestTimeout
	b.answer(c, errorAnswer(c.id, wire.RPCRequestTimeout,
		fmt.Sprintf("the MCP server did not answer within %v", d),
		wire.RPCErrorData{Reason: wire.MCPReasonTimeout, TimeoutMS: d.Milliseconds()}))
	b.writeCancel(c, encode(map[string]string{"reason": "mcpp bridge: no answer within " + d.String()}))
}

// failCalls answers every call sent on session s with a server_down
// error: s ended, and their answers will not come.
func (b *Bridge) failCalls(s *session) {
	for _, c := range b.calls.takeAll(func(c *call) bool { return c.sess == s }) {
		b.endQuestions(c)
		b.answer(c, serverDownAnswer(c.id))
	}
}

// answer sends a call's answer to its requester, in the call's trace.
func (b *Bridge) answer(c *call, payload json.RawMessage) {
	endCall(c, payload, "")
	b.out.send(&wire.Envelope{
		Kind: responseKind(c.kind), To: []string{c.requester},
		CorrelationID: wire.CorrelationID{c.envID}, Context: c.context, Payload: payload, Trace: traceOf(c.span),
	})
}

// reply answers a request envelope at once, with payload, in the
// request's trace.
func (b *Bridge) reply(env *wire.Envelope, payload json.RawMessage) {
	b.out.send(&wire.Envelope{
		Kind: responseKind(env.Kind), To: []string{env.From},
		CorrelationID: wire.CorrelationID{env.ID}, Context: env.Context, Payload: payload, Trace: env.Trace,
	})
}

// responseKind is the kind of the answer to a request of kind: mcp/response,
// or MCPx's mcp/response:METHOD[:NAME] for mcp/request:METHOD[:NAME].
func responseKind(kind string) string {
	if rest, ok := strings.CutPrefix(kind, wire.KindMCPRequest); ok {
		return wire.KindMCPResponse + rest
	}
	return wire.KindMCPResponse
}
