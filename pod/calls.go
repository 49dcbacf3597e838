package pod

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/limits"
	"github.com/mcpp/gateway/tracing"
	"github.com/mcpp/gateway/wire"
)

// Calls the gateway can vouch for (docs/protocol.md section 11): an
// mcp/request names one recipient; the gateway keeps it in flight until
// an mcp/response from that recipient, correlated to it, goes to its
// requester alone; when the recipient leaves, or no answer comes within
// the timeout, the gateway answers the requester itself (an mcp/response
// from system:gateway carrying a JSON-RPC error), and an answer that
// comes later is dropped and counted.
//
// Every node keeps the pod's calls, as it applies the pod's frames: it
// must know, for a response a participant of its own sends, which request
// it answers. The node that accepted a request (its origin) is the one
// that answers for the recipient: it alone arms the timer, and answers
// when the recipient leaves. Everything here runs with Pod.mu held.

func orDefault[T comparable](v, d T) T {
	var zero T
	if v == zero {
		return d
	}
	return v
}

// CallMetrics count the gateway's part in calls and proposals.
type CallMetrics struct {
	// Requests counts the mcp/requests accepted that wait for an answer.
	Requests prometheus.Counter
	// GatewayAnswers counts the gateway's own answers, by reason
	// (wire.MCPReason…).
	GatewayAnswers *prometheus.CounterVec
	// Late counts the answers dropped because their request was no longer
	// in flight (answered, timed out, or its requester left).
	Late prometheus.Counter
	// Proposals counts proposals' changes of state, by state.
	Proposals *prometheus.CounterVec
}

func newCallMetrics() *CallMetrics {
	return &CallMetrics{
		Requests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpp_mcp_requests_total", Help: "mcp/requests accepted that wait for an answer (they have a JSON-RPC id)."}),
		GatewayAnswers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpp_mcp_gateway_answers_total", Help: "mcp/responses the gateway sent for a recipient, by reason: timeout, recipient_left, recipient_absent."}, []string{"reason"}),
		Late: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpp_mcp_late_responses_total", Help: "mcp/responses dropped because their request was no longer in flight (answered, timed out, or its requester left)."}),
		Proposals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpp_proposals_total", Help: "Proposals' changes of state, by state: pending (made), approved, fulfilled, rejected, withdrawn, expired."}, []string{"state"}),
	}
}

func (m *CallMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Requests, m.GatewayAnswers, m.Late, m.Proposals}
}

// call is one mcp/request in flight.
type call struct {
	requester, recipient string
	// rpcID is the request's JSON-RPC id, as written, for the gateway's
	// answer.
	rpcID json.RawMessage
	// suffix is what follows mcp/request in an MCPx kind
	// (":tools/call:echo"), so that the answer's kind mirrors it.
	suffix string
	origin string
	// ctx is the request's context, in which the gateway answers, so that
	// its answer folds away with the request.
	ctx   callContext
	at    time.Time
	live  bool        // the request is ephemeral: its answer is not stored either
	timer *time.Timer // on the origin node
	span  trace.Span  // on the origin node, with tracing on (tracing.go)
}

// callContext is a frame's context, kept for the gateway's answer.
type callContext struct {
	id, typ, parent string
	path            bool
	ancestors       []string
}

func contextOfFrame(m *envelope.Meta) callContext {
	if m.ContextID == "" {
		return callContext{}
	}
	c := callContext{id: strings.Clone(m.ContextID), typ: strings.Clone(m.ContextType), parent: strings.Clone(m.ContextParent), path: m.Path()}
	for _, a := range m.Ancestors {
		c.ancestors = append(c.ancestors, strings.Clone(a))
	}
	return c
}

// calls are a pod's requests in flight, by request envelope id, and the
// waits of this node's own requests for their answers. Call its methods
// with Pod.mu held.
type calls struct {
	byID         map[string]*call
	byRequester  map[string]int
	waiters      waits
	cfg          limits.Calls
	sweepingFrom time.Time
}

// init takes the node's limits of calls (limits.Calls); a field left zero
// takes its default.
func (t *calls) init(cfg limits.Calls) {
	t.byID, t.byRequester, t.waiters = map[string]*call{}, map[string]int{}, waits{}
	t.cfg = limits.Calls{
		MCPRequestTimeout:            orDefault(cfg.MCPRequestTimeout, limits.DefaultMCPRequestTimeout),
		MaxMCPRequestsPerParticipant: orDefault(cfg.MaxMCPRequestsPerParticipant, limits.DefaultMaxMCPRequestsPerParticipant),
		MaxMCPRequestsPerPod:         orDefault(cfg.MaxMCPRequestsPerPod, limits.DefaultMaxMCPRequestsPerPod),
		ProposalTimeout:              orDefault(cfg.ProposalTimeout, limits.DefaultProposalTimeout),
		MaxProposalsPerParticipant:   orDefault(cfg.MaxProposalsPerParticipant, limits.DefaultMaxProposalsPerParticipant),
		MaxProposalsPerPod:           orDefault(cfg.MaxProposalsPerPod, limits.DefaultMaxProposalsPerPod),
	}
}

func (t *calls) add(id string, c *call) {
	t.byID[id] = c
	t.byRequester[c.requester]++
}

// remove takes the call id out and stops its timer; it returns it, or nil.
func (t *calls) remove(id string) *call {
	c := t.byID[id]
	if c == nil {
		return nil
	}
	delete(t.byID, id)
	if t.byRequester[c.requester]--; t.byRequester[c.requester] <= 0 {
		delete(t.byRequester, c.requester)
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	return c
}

// callInfo is what ingress read of an MCP envelope.
type callInfo struct {
	request, response bool
	// rpcID is a request's JSON-RPC id (nil: a notification, which waits
	// for no answer and is not tracked).
	rpcID json.RawMessage
	// correlation is the request a response answers, or the call a
	// question is asked for.
	correlation string
	suffix      string
	// question: the request is one a server asks of its client
	// (questionMethod): it goes to the caller of a call in flight to its
	// sender alone, correlated to that call.
	question bool
	// cancels is, for a notifications/cancelled, the JSON-RPC id of the
	// request it cancels (params.requestId, compacted); cancelsCall is that
	// call's envelope id, once checkCall found it in flight.
	cancels     string
	cancelsCall string
	// payload is the envelope's payload, while it is being accepted (its
	// call's span reads it).
	payload []byte
}

// tracked reports whether the envelope is a call the gateway keeps in
// flight, the answer to one, or the cancellation of one.
func (ci *callInfo) tracked() bool {
	return ci.request && ci.rpcID != nil || ci.response || ci.cancels != ""
}

// questionMethod reports whether method is one MCP's servers ask of their
// clients: sent as an mcp/request, it is a question of a server to the
// caller of a call in flight to it (docs/protocol.md section 11).
func questionMethod(method string) bool {
	switch method {
	case "elicitation/create", "sampling/createMessage", "roots/list":
		return true
	}
	return false
}

// cancelled is the method of MCP's cancellation of a request.
const cancelled = "notifications/cancelled"

// readCall reads an mcp/request's or mcp/response's envelope (its kind,
// payload and correlation_id), refusing one the gateway cannot vouch for:
// a request without exactly one recipient or without a method, a response
// without exactly one request it answers or with more than one recipient.
func readCall(kind string, to []string, payload, raw []byte, correlation gjson.Result) (callInfo, *envelope.Error) {
	ci := callInfo{payload: payload}
	switch {
	case wire.IsMCPRequest(kind):
		ci.request, ci.suffix = true, kind[len(wire.KindMCPRequest):]
		if len(to) != 1 {
			return ci, envelope.Errorf(wire.CodeInvalidRecipient, "an mcp/request names exactly one recipient in to (this one names %d): the one whose tool it calls", len(to))
		}
		// Its recipient judges the request itself (an MCP server answers
		// a malformed one with a JSON-RPC error); the gateway needs an
		// object, and its id, which says whether an answer is due.
		p := gjson.ParseBytes(payload)
		if !p.IsObject() {
			return ci, envelope.Errorf(wire.CodeInvalidEnvelope, `an mcp/request's payload is a JSON-RPC request object: {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {…}}`)
		}
		if id := p.Get("id"); id.Exists() {
			ci.rpcID = json.RawMessage(id.Raw)
		}
		switch method := p.Get("method").Str; {
		case questionMethod(method) && ci.rpcID != nil:
			ci.question = true
			var ok bool
			if ci.correlation, ok = oneCorrelation(correlation); !ok {
				return ci, envelope.Errorf(wire.CodeInvalidEnvelope, "%s is a server's question of its caller: its correlation_id names the caller's request it is asked for, one", method)
			}
		case method == cancelled && ci.rpcID == nil:
			rid := p.Get("params.requestId")
			if !rid.Exists() {
				return ci, envelope.Errorf(wire.CodeInvalidEnvelope, "notifications/cancelled names the request it cancels in params.requestId")
			}
			ci.cancels = compactJSON(rid.Raw)
		}
		if gjson.GetBytes(raw, "approval").Exists() {
			return ci, envelope.Errorf(wire.CodeInvalidEnvelope, "approval is the gateway's: it names who approved a proposed call it released (docs/protocol.md section 11)")
		}
	case wire.IsMCPResponse(kind):
		ci.response, ci.suffix = true, kind[len(wire.KindMCPResponse):]
		var ok bool
		if ci.correlation, ok = oneCorrelation(correlation); !ok {
			return ci, envelope.Errorf(wire.CodeInvalidEnvelope, "an mcp/response's correlation_id names the one request it answers (its envelope id)")
		}
		if len(to) > 1 {
			return ci, envelope.Errorf(wire.CodeInvalidRecipient, "an mcp/response goes to its requester alone: to names %d participants", len(to))
		}
	}
	return ci, nil
}

// checkCall applies the rules that need the pod's calls: a request within
// the bounds of what may be in flight; a response to a request in flight
// to its sender, addressed to the requester alone. A late response is
// counted and dropped (refused to its sender). Call it with Pod.mu held.
func (p *Pod) checkCall(ci *callInfo, sender string, to []string) *envelope.Error {
	t := &p.calls
	switch {
	case ci.request && ci.rpcID != nil:
		if ci.question {
			if c := t.byID[ci.correlation]; c == nil || c.recipient != sender || c.requester != to[0] {
				return envelope.Errorf(wire.CodeInvalidRecipient, "a server's question goes to the caller of a call in flight to it, correlated to that call: no request of %s to you with id %q is in flight", to[0], ci.correlation)
			}
		}
		if n := t.byRequester[sender]; n >= t.cfg.MaxMCPRequestsPerParticipant {
			return envelope.Errorf(wire.CodeRequestLimitExceeded, "you have %d mcp/requests in flight in this pod, the most there may be (--max-mcp-requests-per-participant): wait for their answers", n)
		}
		// The gateway's own requests (Ask) are not the participants':
		// they never fill the pod's bound.
		if n := len(t.byID) - t.byRequester[wire.GatewayID]; n >= t.cfg.MaxMCPRequestsPerPod {
			return envelope.Errorf(wire.CodeRequestLimitExceeded, "the pod has %d mcp/requests in flight, the most there may be (--max-mcp-requests-per-pod): try again when some are answered", n)
		}
	case ci.response:
		c := t.byID[ci.correlation]
		if c == nil || c.recipient != sender {
			p.node.Metrics.Calls.Late.Inc()
			return envelope.Errorf(wire.CodeNoPendingRequest, "no mcp/request %q to you is in flight (answered, timed out, or its requester left): the answer is dropped", ci.correlation)
		}
		if len(to) == 1 && to[0] != c.requester {
			return envelope.Errorf(wire.CodeInvalidRecipient, "an mcp/response goes to its requester alone: to must be [%q] (or be left out)", c.requester)
		}
	case ci.cancels != "":
		if ci.cancelsCall = t.cancelled(sender, to[0], ci.cancels); ci.cancelsCall == "" {
			return envelope.Errorf(wire.CodeNoPendingRequest, "no request of yours to %s with id %s is in flight (answered already, or never made): nothing to cancel", to[0], ci.cancels)
		}
	}
	return nil
}

// cancelled is the envelope id of the call in flight from requester to
// recipient whose JSON-RPC id is rpcID (compacted), or "".
func (t *calls) cancelled(requester, recipient, rpcID string) string {
	for id, c := range t.byID {
		if c.requester == requester && c.recipient == recipient && compactJSON(string(c.rpcID)) == rpcID {
			return id
		}
	}
	return ""
}

// compactJSON is a JSON text without its white space, to compare ids.
func compactJSON(raw string) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(raw)) != nil {
		return raw
	}
	return b.String()
}

// requesterOf is the requester of the request id in flight, or "".
func (p *Pod) requesterOf(id string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.calls.byID[id]; c != nil {
		return c.requester
	}
	return ""
}

// liveAnswer reports whether a response answers an ephemeral request:
// then it is not stored either. Call it with Pod.mu held.
func (p *Pod) liveAnswer(ci *callInfo) bool {
	c := p.calls.byID[ci.correlation]
	return ci.response && c != nil && c.live
}

// acceptCall records an MCP envelope this node accepted, before it is
// committed: a request goes in flight (its timer armed here, its origin),
// a response takes its request out. Call it with Pod.mu held.
func (p *Pod) acceptCall(ci *callInfo, m *envelope.Meta, now time.Time) {
	switch {
	case ci.request && ci.rpcID != nil:
		c := &call{requester: strings.Clone(m.From), recipient: strings.Clone(m.To[0]), rpcID: ci.rpcID, suffix: strings.Clone(ci.suffix),
			origin: p.node.ID, ctx: contextOfFrame(m), at: now, live: m.Live()}
		id := strings.Clone(m.ID)
		c.rpcID = append(json.RawMessage(nil), ci.rpcID...)
		p.calls.add(id, c)
		p.armCall(id, c)
		p.startCall(c, ci, m)
		p.node.Metrics.Calls.Requests.Inc()
		if c.requester != wire.GatewayID {
			p.m.calls.Inc()
		}
	case ci.response:
		c := p.calls.remove(ci.correlation)
		p.callEnded(c, false)
		endCall(c, tracing.ByRecipient, ci.payload, "")
	case ci.cancels != "":
		// Cancelled: no answer will come, and none is owed.
		endCall(p.calls.remove(ci.cancelsCall), "", nil, "cancelled")
	}
}

// afterCall answers, right after it was committed, a request whose
// recipient is not in the pod. Call it with Pod.mu held.
func (p *Pod) afterCall(ci *callInfo, m *envelope.Meta) {
	if !ci.request || ci.rpcID == nil {
		return
	}
	if c := p.calls.byID[m.ID]; c != nil && !p.present(c.recipient) {
		p.answerCall(m.ID, c, wire.RPCConnectionClosed, wire.MCPReasonRecipientAbsent,
			fmt.Sprintf("%s is not in the pod", c.recipient))
	}
}

// present reports whether id is a member of the pod on any node. Call it
// with Pod.mu held.
func (p *Pod) present(id string) bool {
	if _, ok := p.members[id]; ok {
		return true
	}
	if _, ok := p.guests[id]; ok {
		return true
	}
	_, ok := p.remote[id]
	return ok
}

// armCall starts the timer of a call this node answers for. Call it with
// Pod.mu held.
func (p *Pod) armCall(id string, c *call) {
	c.timer = time.AfterFunc(p.calls.cfg.MCPRequestTimeout, func() {
		p.lock()
		defer p.unlock()
		if p.calls.byID[id] == c && !p.dead {
			p.answerCall(id, c, wire.RPCRequestTimeout, wire.MCPReasonTimeout,
				fmt.Sprintf("%s did not answer within %v (--mcp-request-timeout)", c.recipient, p.calls.cfg.MCPRequestTimeout))
		}
	})
}

// applyCall does what an MCP frame of the pod's order does on this node,
// and reports whether it is to be delivered. A frame this node committed
// was recorded when it was accepted (acceptCall); another node's is
// recorded here. A response is handed to whoever on this node awaits it;
// one whose request is no longer in flight (another answer came first,
// crossing it between nodes) is counted and not delivered, unless it is
// the gateway's own. A frame of the pod's past (past) is recorded alone:
// nobody awaits it, and it is delivered to nobody. Call it with Pod.mu
// held.
func (p *Pod) applyCall(m *envelope.Meta, body []byte, local, past bool, at time.Time) bool {
	r := gjson.GetManyBytes(body, "kind", "payload.id", "correlation_id")
	kind := r[0].String()
	switch {
	case wire.IsMCPRequest(kind):
		if !local && len(m.To) == 1 && r[1].Exists() {
			c := &call{requester: strings.Clone(m.From), recipient: strings.Clone(m.To[0]),
				rpcID: json.RawMessage(r[1].Raw), suffix: kind[len(wire.KindMCPRequest):], origin: strings.Clone(m.Origin),
				ctx: contextOfFrame(m), at: at, live: m.Live()}
			p.calls.add(strings.Clone(m.ID), c)
		}
		if !local && len(m.To) == 1 && !r[1].Exists() {
			if rid := gjson.GetBytes(body, "payload.params.requestId"); rid.Exists() && gjson.GetBytes(body, "payload.method").Str == cancelled {
				p.calls.remove(p.calls.cancelled(m.From, m.To[0], compactJSON(rid.Raw)))
			}
		}
		if !past {
			p.aboutCall(m, r[2], body) // a server's question of its caller
		}
		return true
	case kind == wire.KindMCPProposal || kind == wire.KindProposal:
		if kind == wire.KindProposal && !past {
			p.proposalDecided(body)
		}
		if local && !past {
			return true // recorded when it was decided
		}
		return p.applyProposal(m, body, kind, at) && !past
	case kind == wire.KindMCPNotification:
		// Only a server's own word that its lists or a resource changed
		// has the gateway act (notices.go): a participant that serves
		// nothing is never asked.
		if !past {
			p.serverNotified(m.From, body)
			p.aboutCall(m, r[2], body) // progress of a call, to its caller
		}
		return true
	case wire.IsMCPResponse(kind):
		ci, e := readCall(kind, m.To, nil, nil, r[2])
		if e != nil {
			return true // an older gateway's
		}
		if past {
			p.calls.remove(ci.correlation)
			return false
		}
		if len(m.To) == 1 {
			p.calls.waiters.hand(ci.correlation, m.To[0], body)
		}
		if local {
			return true
		}
		c := p.calls.remove(ci.correlation)
		if c == nil && m.From != wire.GatewayID {
			p.node.Metrics.Calls.Late.Inc()
			return false
		}
		p.callEnded(c, false)
		if c != nil && c.span != nil {
			endCall(c, tracing.ByRecipient, []byte(gjson.GetBytes(body, "payload").Raw), "")
		}
		return true
	}
	return true
}

// aboutCall tells the waits of a call's requester on this node (Await) of
// an envelope about the call: a question its recipient asks of it, or its
// progress. It is about the call when it is correlated to a call in
// flight, addressed to that call's requester alone, and sent by that
// call's recipient. Call it with Pod.mu held.
func (p *Pod) aboutCall(m *envelope.Meta, correlation gjson.Result, body []byte) {
	id, ok := oneCorrelation(correlation)
	if !ok || len(m.To) != 1 {
		return
	}
	if c := p.calls.byID[id]; c != nil && c.requester == m.To[0] && c.recipient == m.From {
		p.calls.waiters.tell(id, c.requester, body)
	}
}

// callsMemberGone answers the calls to a member that left, which this
// node answers for, and forgets the calls of a requester that left. Call
// it with Pod.mu held.
func (p *Pod) callsMemberGone(id string) {
	for rid, c := range p.calls.byID {
		switch {
		case c.recipient == id && c.origin == p.node.ID:
			p.answerCall(rid, c, wire.RPCConnectionClosed, wire.MCPReasonRecipientLeft,
				fmt.Sprintf("%s left the pod before it answered", id))
		case c.requester == id:
			endCall(p.calls.remove(rid), "", nil, "requester_left")
		}
	}
}

// sweepCalls forgets the calls that another node answers for and that
// have waited far past the timeout: that node is gone, or its answer was
// lost with it. Call it with Pod.mu held.
func (p *Pod) sweepCalls(now time.Time) {
	limit := 2*p.calls.cfg.MCPRequestTimeout + time.Minute
	for id, c := range p.calls.byID {
		if c.timer == nil && now.Sub(c.at) > limit {
			p.calls.remove(id)
		}
	}
}

// AnswerFor answers call id, in flight to recipient, for it: the
// gateway's mcp/response carrying a JSON-RPC error (code, message, data
// {"reason", "recipient"}), as it answers for a recipient that left. The
// MCP endpoint answers so, for an MCP host, a question the host cannot
// answer itself. It reports false when no such call is in flight.
func (p *Pod) AnswerFor(id, recipient string, code int, reason, message string) bool {
	p.lock()
	defer p.unlock()
	c := p.calls.byID[id]
	if p.dead || c == nil || c.recipient != recipient {
		return false
	}
	p.answerCall(id, c, code, reason, message)
	return true
}

// answerCall answers the requester of call id for its recipient: an
// mcp/response from system:gateway, correlated to the request, in its
// context, carrying a JSON-RPC error (code, and data {"reason", …}). Call
// it with Pod.mu held.
func (p *Pod) answerCall(id string, c *call, code int, reason, why string) {
	p.calls.remove(id)
	p.callEnded(c, true)
	callTrace := envelope.TraceContext{}
	if c.span != nil {
		callTrace = tracing.Of(c.span.SpanContext()) // the gateway's answer continues the call's span
	}
	endCall(c, tracing.ByGateway, nil, reason)
	data, _ := json.Marshal(wire.RPCErrorData{Reason: reason, Recipient: c.recipient, TimeoutMS: timeoutMS(reason, p.calls.cfg.MCPRequestTimeout)})
	rpcID := c.rpcID
	if rpcID == nil {
		rpcID = json.RawMessage("null")
	}
	msg := newSystemMessage(wire.ProtocolMCPP, wire.KindMCPResponse+c.suffix, wire.RPCErrorResponse{
		JSONRPC: "2.0", ID: rpcID, Error: wire.RPCError{Code: code, Message: why, Data: data}})
	msg.To, msg.CorrelationID = []string{c.requester}, id
	if c.ctx.id != "" {
		msg.Context = wire.Context{ID: c.ctx.id}
	}
	body := msg.bytes()
	m := envelope.Meta{Kind: envelope.FrameEnvelope, Flags: envelope.FlagCall, Origin: p.node.ID, From: wire.GatewayID,
		To: []string{c.requester}, ID: msg.ID, Seq: p.node.frameSeq.Add(1), Protocol: protocolSpan,
		ContextID: c.ctx.id, ContextType: c.ctx.typ, ContextParent: c.ctx.parent, Ancestors: c.ctx.ancestors, Trace: callTrace}
	if c.ctx.path {
		m.Flags |= envelope.FlagPath
	}
	if c.live {
		m.Flags |= envelope.FlagLive
	}
	p.node.Metrics.Calls.GatewayAnswers.WithLabelValues(reason).Inc()
	p.commit(&m, body, envelope.Frame(&m, body), 0, timeNow())
}

func timeoutMS(reason string, d time.Duration) int64 {
	if reason != wire.MCPReasonTimeout {
		return 0
	}
	return d.Milliseconds()
}

// ErrNotPresent: the participant asked is not in the pod.
var ErrNotPresent = errors.New("not in the pod")

// Ask sends the gateway's own mcp/request (from system:gateway) to a
// participant that serves MCP, and waits for its answer, at most the
// call timeout or ctx's end, when the request ends too. The request and
// its answer are live: the pod's history keeps neither (what the gateway
// asks for the MCP hosts it serves does not crowd the history), though
// members that watch the pod see them. The gateway's requests are not
// counted against the pod's bound of requests in flight.
func (p *Pod) Ask(ctx context.Context, to string, payload json.RawMessage) ([]byte, error) {
	msg := newSystemMessage(wire.ProtocolMCPP, wire.KindMCPRequest, payload)
	msg.To = []string{to}
	body := msg.bytes()
	ci, e := readCall(wire.KindMCPRequest, msg.To, payload, nil, gjson.Result{})
	if e != nil || ci.rpcID == nil {
		return nil, fmt.Errorf("pod: Ask needs a JSON-RPC request with an id: %v", e)
	}
	m := envelope.Meta{Kind: envelope.FrameEnvelope, Flags: envelope.FlagCall | envelope.FlagLive, Origin: p.node.ID,
		From: wire.GatewayID, To: msg.To, ID: msg.ID, Protocol: protocolSpan}
	x := &waiter{who: wire.GatewayID, ch: make(chan []byte, 1)}
	p.lock()
	if p.dead || !p.present(to) {
		p.unlock()
		return nil, fmt.Errorf("%s: %w", to, ErrNotPresent)
	}
	p.calls.waiters[msg.ID] = append(p.calls.waiters[msg.ID], x)
	m.Seq = p.node.frameSeq.Add(1)
	p.acceptCall(&ci, &m, timeNow())
	p.commit(&m, body, envelope.Frame(&m, body), 0, timeNow())
	p.unlock()
	select {
	case answer := <-x.ch:
		return answer, nil
	case <-ctx.Done():
		// Its wait ends, and so does the request: the gateway answers
		// nobody for it, and a late answer is dropped and counted.
		p.mu.Lock()
		p.calls.waiters.forget(msg.ID, x.ch)
		endCall(p.calls.remove(msg.ID), "", nil, "cancelled")
		p.mu.Unlock()
		return nil, ctx.Err()
	}
}

// The MCP servers of a pod (docs/protocol.md section 11): participants
// that joined with serves=mcp. The gateway's MCP endpoint lists their
// tools, resources and prompts to its hosts; it is told (Node.OnServers)
// when one joins or leaves, and when one says its lists or a resource
// changed (an mcp/notification of notices.go, which ingress flags for
// it).

// servesMCP reports whether an identity is an MCP server's.
func servesMCP(id wire.Identity) bool {
	for _, s := range id.Serves {
		if s == wire.ServesMCP {
			return true
		}
	}
	return false
}

// servesMCP reports whether participant id, on any node, joined with
// serves=mcp. Call it with Pod.mu held.
func (p *Pod) servesMCP(id string) bool {
	if r := p.members[id]; r != nil {
		return servesMCP(identityOf(r))
	}
	if g := p.guests[id]; g != nil {
		return servesMCP(g.Identity)
	}
	r, ok := p.remote[id]
	return ok && servesMCP(r.Identity)
}

// serversChanged tells the node's OnServers, outside the pod's lock, that
// a server came, went, or changed its lists or a resource. Call it with
// Pod.mu held.
func (p *Pod) serversChanged(c ServerChange) {
	if h := p.node.OnServers; h != nil {
		go h(p, c)
	}
}

// presenceOfServer tells OnServers of a presence frame about an MCP
// server. Call it with Pod.mu held.
func (p *Pod) presenceOfServer(body []byte) {
	if id, ok := presenceIdentity(body); ok && servesMCP(id) {
		p.serversChanged(ServerChange{Server: id.ID})
	}
}

// Servers lists the pod's MCP servers, on every node.
func (p *Pod) Servers() []string {
	var out []string
	for _, id := range p.Participants() {
		if servesMCP(id) {
			out = append(out, id.ID)
		}
	}
	return out
}

// MayCall says whether participant id, whose own capabilities are caps,
// may send an mcp/request of payload to server in the context contextID
// ("" for none): directly, by its capabilities or a grant it holds there;
// or else as a proposal (mcp/proposal of the same payload), which someone
// allowed to make the call must approve.
func (p *Pod) MayCall(id string, caps *capability.Set, server string, payload []byte, contextID string) (call, propose bool) {
	if caps.Allows(wire.KindMCPRequest, payload) {
		return true, false
	}
	w := capability.Where{Context: contextID, To: []string{server}}
	if contextID != "" {
		w.Ancestors = p.Registry.Ancestry(&envelope.Context{ID: contextID}, nil)
	}
	g := p.grants.For(id)
	if g.Allows(wire.KindMCPRequest, payload, w) {
		return true, false
	}
	return false, caps.Allows(wire.KindMCPProposal, payload) || g.Allows(wire.KindMCPProposal, payload, w)
}

// oneCorrelation reads a correlation_id that names one envelope: a string,
// or a list of one string.
func oneCorrelation(c gjson.Result) (string, bool) {
	switch {
	case c.Type == gjson.String:
		return c.Str, true
	case c.IsArray() && len(c.Array()) == 1 && c.Array()[0].Type == gjson.String:
		return c.Array()[0].Str, true
	}
	return "", false
}
