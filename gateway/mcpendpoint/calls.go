package mcpendpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/tidwall/gjson"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/wire"
)

// A host's call of a pod server's tool (docs/protocol.md section 9) is the
// host's participant's mcp/request to the server, through the pod as any
// envelope, in the sub-context the host opened last. Everything of MCP's
// call travels with it, end to end:
//
//   - the call's params._meta goes to the server as it came (a trace
//     context, the host's own keys), but for its progress token, which is
//     the call's envelope id in the pod; the server's progress, which the
//     bridge sends the host's participant correlated to the call, reaches
//     the host with its own token (notifications/progress);
//   - what the server asks while it handles the call (a question of the
//     bridge's, correlated to the call: questions.go in package bridge)
//     reaches the host: on a session of a revision before 2026-07-28 as
//     elicitation/create on the host's own session (the SDK's
//     ServerSession.Elicit, on the call's stream); on 2026-07-28, where a
//     server asks nothing outside a call's result, as an input request
//     in an input_required result, whose next round (the host's call again,
//     with inputResponses and requestState) answers it and goes on with the
//     same call; a host that did not declare elicitation (or that mode)
//     does not hear it: the gateway answers the question for it with
//     -32601, as MCP has such a client answer;
//   - a host that cancels the call (notifications/cancelled, or its
//     session's end) cancels it at the server: the host's participant
//     sends the server notifications/cancelled, and the pod releases the
//     call.

// hostCall is one call of a host, from its first request to its answer,
// across the rounds in which a host of MCP 2026-07-28 answers its server's
// questions.
type hostCall struct {
	id     string // the call's envelope id: its mcp/request, or the mcp/proposal it became
	m      *member
	server string
	rpcID  json.RawMessage // the JSON-RPC id of the call's payload, which a cancellation names
	wait   <-chan []byte
	// awaiting is the envelope whose answer ends the call: the call's,
	// or the request an approval of its proposal released ("" while the
	// proposal is undecided).
	awaiting string
	// token is the host's progress token, or nil.
	token any
	// asked is the question handed to a host of 2026-07-28 as an input
	// request, until its next round; idle cancels the call when that
	// round does not come within the call timeout.
	asked *hostQuestion
	idle  *time.Timer
}

// hostQuestion is a server's question to a host, as the pod carried it.
type hostQuestion struct {
	envID  string          // the question's envelope id: the answer is correlated to it
	rpcID  json.RawMessage // its JSON-RPC id, which the answer carries back
	from   string          // who asks: the call's server
	method string
	params json.RawMessage
}

// hostCalls are the calls waiting for their host's next round, by id.
type hostCalls struct {
	mu    sync.Mutex
	calls map[string]*hostCall
}

// callServerTool calls tool of server for the member (the SDK's tool
// handler of SERVER__TOOL), or goes on with the call whose round
// req.Params.RequestState names.
func (e *Endpoint) callServerTool(ctx context.Context, m *member, server, tool string, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if m == nil || m.ended() {
		return nil, errSessionEnded
	}
	if req.Params.RequestState != "" {
		return e.resumeCall(ctx, m, req)
	}
	args := req.Params.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage(`{}`)
	}
	hc := &hostCall{id: uuid.NewString(), m: m, server: server}
	hc.rpcID, _ = json.Marshal(uuid.NewString())
	params := map[string]any{"name": tool, "arguments": args}
	if meta := maps.Clone(req.Params.Meta); len(meta) > 0 {
		// The keys of the host's connection to the gateway are not the
		// call's: the server's client (the bridge) writes its own.
		for _, k := range wire.MCPConnectionMeta {
			delete(meta, k)
		}
		if tok, ok := meta["progressToken"]; ok && tok != nil {
			hc.token, meta["progressToken"] = tok, hc.id
		}
		if len(meta) > 0 {
			params["_meta"] = meta
		}
	}
	payload, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": hc.rpcID, "method": "tools/call", "params": params})
	if err != nil {
		return refusalResult(refuse(envelope.Errorf(wire.CodeInvalidEnvelope, "the arguments do not marshal: %v", err))), nil
	}
	out := outgoing{ID: hc.id, Kind: wire.KindMCPRequest, To: []string{server}, Payload: payload, Trace: traceField(ctx)}
	cx := m.branch()
	if cx != "" {
		out.Context = wire.Context{ID: cx}.JSON()
	}
	hc.awaiting = hc.id
	if call, propose := m.pod.MayCall(m.id, m.caps.Load(), server, payload, cx); !call && propose {
		// It may not make the call, but may propose it: someone allowed
		// to make it decides (docs/protocol.md section 11).
		out.Kind, hc.awaiting = wire.KindMCPProposal, ""
	}
	hc.wait = m.pod.Await(hc.id, m.id)
	if res, err := m.relayCall(out, hc.wait); res != nil || err != nil {
		return res, err
	}
	return e.follow(ctx, req, hc, proposalWait)
}

// proposalWait bounds how long a host's call that became a proposal
// waits for the decision before it returns a result saying it is still
// pending (docs/protocol.md section 9); proposal_wait waits again.
const proposalWait = 30 * time.Second

// relayCall relays a host's call (a request or a proposal whose answer
// the pod awaits on wait) and returns nothing when it was relayed.
// Otherwise the pod forgets the wait, and a refusal is the tool's result
// (an error result) where any other error is the call's.
func (m *member) relayCall(out outgoing, wait <-chan []byte) (*mcp.CallToolResult, error) {
	_, err := m.relay(out)
	if err == nil {
		return nil, nil
	}
	m.pod.Forget(out.ID, wait)
	var no refused
	if errors.As(err, &no) {
		return refusalResult(no), nil
	}
	return nil, err
}

// follow waits for the call's answer, passing the host what comes about
// the call meanwhile: its proposal's decision, its progress, its server's
// questions. A proposal still undecided after wait returns a result that
// says so (proposal_wait waits again).
func (e *Endpoint) follow(ctx context.Context, req *mcp.CallToolRequest, hc *hostCall, wait time.Duration) (*mcp.CallToolResult, error) {
	var undecided <-chan time.Time
	if hc.awaiting == "" {
		t := time.NewTimer(wait)
		defer t.Stop()
		undecided = t.C
	}
	for {
		select {
		case body := <-hc.wait:
			kind := gjson.GetBytes(body, "kind").Str
			switch {
			case kind == wire.KindProposal:
				res, done := e.decided(hc, body)
				if done {
					return res, nil
				}
				undecided = nil
			case wire.IsMCPResponse(kind):
				if c, _ := oneID(gjson.GetBytes(body, "correlation_id")); c == hc.awaiting {
					e.endCall(hc)
					return toolResult(gjson.GetBytes(body, "from").Str, body), nil
				}
			case kind == wire.KindMCPNotification:
				e.progress(ctx, req, hc, body)
			case wire.IsMCPRequest(kind):
				if res := e.question(ctx, req, hc, body); res != nil {
					return res, nil
				}
			}
		case <-undecided:
			e.endCall(hc)
			return pendingResult(hc.id, "pending: nobody allowed to make the call has decided yet", ""), nil
		case <-ctx.Done():
			e.cancelCall(hc, "the MCP host cancelled the call")
			return nil, ctx.Err()
		case <-hc.m.done:
			e.cancelCall(hc, "the MCP host's session ended")
			return nil, errSessionEnded
		}
	}
}

// oneID reads a correlation_id that names one envelope.
func oneID(c gjson.Result) (string, bool) {
	switch {
	case c.Type == gjson.String:
		return c.Str, true
	case c.IsArray() && len(c.Array()) == 1:
		return c.Array()[0].Str, true
	}
	return "", false
}

// decided takes the system/proposal event that ends the call's proposal:
// approved, the call goes on, awaiting the released request's answer;
// anything else ends the call with a result that says so.
func (e *Endpoint) decided(hc *hostCall, body []byte) (*mcp.CallToolResult, bool) {
	ev := gjson.GetBytes(body, "payload")
	switch state := ev.Get("state").String(); state {
	case wire.ProposalApproved:
		hc.awaiting = ev.Get("request").String()
		return nil, false
	case wire.ProposalFulfilled:
		e.endCall(hc)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(
			"your call was proposed (proposal %s) and %s made it itself (request %s): its answer went to %s, as MEW's fulfilments go",
			hc.id, ev.Get("by").String(), ev.Get("request").String(), ev.Get("by").String())}}}, true
	default:
		e.endCall(hc)
		text := fmt.Sprintf("your call was proposed (proposal %s) and %s by %s", hc.id, state, ev.Get("by").String())
		if r := ev.Get("reason").String(); r != "" {
			text += ": " + r
		}
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}, true
	}
}

// progress passes the server's notifications/progress about the call to
// the host, with the host's own token; a host that asked for none hears
// none.
func (e *Endpoint) progress(ctx context.Context, req *mcp.CallToolRequest, hc *hostCall, body []byte) {
	p := gjson.GetBytes(body, "payload")
	if p.Get("method").Str != "notifications/progress" || hc.token == nil {
		return
	}
	params := &mcp.ProgressNotificationParams{ProgressToken: hc.token, Progress: p.Get("params.progress").Float(),
		Total: p.Get("params.total").Float(), Message: p.Get("params.message").Str}
	if err := req.Session.NotifyProgress(ctx, params); err != nil {
		e.g.Log.Debug("a call's progress could not be told to its MCP host", "pod", hc.m.pod.Name, "err", err)
	}
}

// question passes a question of the call's server to the host. A host of
// MCP 2026-07-28 gets it as an input request in the result returned
// (non-nil), and answers it in the call's next round; an older one on its
// session at once. One that cannot hear it has it answered for it.
func (e *Endpoint) question(ctx context.Context, req *mcp.CallToolRequest, hc *hostCall, body []byte) *mcp.CallToolResult {
	r := gjson.GetManyBytes(body, "id", "from", "payload.id", "payload.method", "payload.params")
	q := &hostQuestion{envID: r[0].Str, from: r[1].Str, rpcID: json.RawMessage(r[2].Raw), method: r[3].Str, params: json.RawMessage(r[4].Raw)}
	m := hc.m
	if !r[2].Exists() {
		return nil // a notification (the question's cancellation): nothing to answer
	}
	var params mcp.ElicitParams
	if q.method != "elicitation/create" || json.Unmarshal(q.params, &params) != nil {
		m.pod.AnswerFor(q.envID, m.id, jsonrpc.CodeMethodNotFound, wire.MCPReasonHostCannotAnswer, "Method not found")
		return nil
	}
	if !elicits(req.ClientCapabilities(), params.Mode) {
		m.pod.AnswerFor(q.envID, m.id, jsonrpc.CodeMethodNotFound, wire.MCPReasonHostCannotAnswer, "Method not found")
		return nil
	}
	if req.ProtocolVersion() < statelessVersion {
		res, err := req.Session.Elicit(ctx, &params)
		if err != nil {
			code, msg := int64(jsonrpc.CodeInternalError), "the MCP host's session could not be asked: "+err.Error()
			var we *jsonrpc.Error
			if errors.As(err, &we) {
				code, msg = we.Code, we.Message
			}
			m.pod.AnswerFor(q.envID, m.id, int(code), wire.MCPReasonHostCannotAnswer, msg)
			return nil
		}
		e.answerQuestion(hc, q, res)
		return nil
	}
	hc.asked = q
	e.park(hc)
	return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{q.envID: &params}, RequestState: hc.id}
}

// elicits reports whether a client with caps hears elicitation in mode
// ("" is form): MCP's form mode is what a client that declared
// elicitation without modes hears.
func elicits(caps *mcp.ClientCapabilities, mode string) bool {
	if caps == nil || caps.Elicitation == nil {
		return false
	}
	el := caps.Elicitation
	if mode == "url" {
		return el.URL != nil
	}
	return el.Form != nil || el.URL == nil
}

// answerQuestion sends the host's answer to q, as its participant's
// mcp/response to the question; one its capabilities refuse is answered
// for it with an error, so that the server does not wait for nothing.
func (e *Endpoint) answerQuestion(hc *hostCall, q *hostQuestion, result any) {
	m := hc.m
	payload, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": q.rpcID, "result": result})
	if err == nil {
		corr, _ := json.Marshal(q.envID)
		_, err = m.relay(outgoing{Kind: wire.KindMCPResponse, To: []string{q.from}, CorrelationID: corr, Payload: payload})
	}
	if err != nil {
		m.pod.AnswerFor(q.envID, m.id, jsonrpc.CodeInternalError, wire.MCPReasonHostCannotAnswer,
			"the MCP host answered, and its answer could not be sent: "+err.Error())
	}
}

// park keeps a call until its host's next round, for at most the call
// timeout: a host that does not come back has its call cancelled.
func (e *Endpoint) park(hc *hostCall) {
	e.rounds.mu.Lock()
	defer e.rounds.mu.Unlock()
	e.rounds.calls[hc.id] = hc
	hc.idle = time.AfterFunc(e.g.Node.Config.MCPRequestTimeout, func() {
		if e.unpark(hc.id, hc.m) == hc {
			e.cancelCall(hc, "the MCP host did not come back with the input its server asked for")
		}
	})
}

// unpark takes out the call id waiting for m's next round, or nil.
func (e *Endpoint) unpark(id string, m *member) *hostCall {
	e.rounds.mu.Lock()
	defer e.rounds.mu.Unlock()
	hc := e.rounds.calls[id]
	if hc == nil || hc.m != m {
		return nil
	}
	delete(e.rounds.calls, id)
	hc.idle.Stop()
	return hc
}

// resumeCall is a host's next round of a call that asked it something:
// its answer goes to the server, and the call goes on.
func (e *Endpoint) resumeCall(ctx context.Context, m *member, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	hc := e.unpark(req.Params.RequestState, m)
	if hc == nil {
		return refusalResult(refuse(envelope.Errorf(wire.CodeNoPendingRequest,
			"no call of yours waits for input under requestState %q: it ended, timed out, or is another's", req.Params.RequestState))), nil
	}
	q := hc.asked
	hc.asked = nil
	if res, ok := req.Params.InputResponses[q.envID]; ok {
		e.answerQuestion(hc, q, res)
	} else {
		m.pod.AnswerFor(q.envID, m.id, jsonrpc.CodeInvalidParams, wire.MCPReasonHostCannotAnswer, "the MCP host's next round answered none of the input requests")
	}
	return e.follow(ctx, req, hc, proposalWait)
}

// endCall forgets the call's waits.
func (e *Endpoint) endCall(hc *hostCall) {
	hc.m.pod.Forget(hc.id, hc.wait)
	if hc.awaiting != "" && hc.awaiting != hc.id {
		hc.m.pod.Forget(hc.awaiting, hc.wait)
	}
}

// cancelCall ends a call its host gave up: a request in flight is
// cancelled at its server (the host's participant's notifications/
// cancelled, which releases it in the pod); an undecided proposal stays
// pending, for proposal_wait.
func (e *Endpoint) cancelCall(hc *hostCall, why string) {
	e.endCall(hc)
	if hc.awaiting == "" || hc.m.ended() {
		return
	}
	// A released request is the proposer's call of the same payload to
	// the same server: the same cancellation names it.
	payload, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/cancelled",
		"params": map[string]any{"requestId": hc.rpcID, "reason": why}})
	if _, err := hc.m.relay(outgoing{Kind: wire.KindMCPRequest, To: []string{hc.server}, Payload: payload}); err != nil {
		e.g.Log.Debug("a host's cancellation could not be sent", "pod", hc.m.pod.Name, "server", hc.server, "err", err)
	}
}

// toolResult is the tool's result for an mcp/response's body: the
// server's result as it came, or its error (the gateway's, for a server
// that did not answer) as an error result.
func toolResult(server string, body []byte) *mcp.CallToolResult {
	p := gjson.GetBytes(body, "payload")
	if r := p.Get("result"); r.Exists() {
		var res mcp.CallToolResult
		if err := json.Unmarshal([]byte(r.Raw), &res); err == nil {
			return &res
		}
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{
			Text: fmt.Sprintf("%s answered a result that is not a tool's result: %s", server, r.Raw)}}}
	}
	e := p.Get("error")
	text := fmt.Sprintf("%s answered error %d: %s", server, e.Get("code").Int(), e.Get("message").String())
	if d := e.Get("data"); d.Exists() {
		text += " " + d.Raw
	}
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// pendingResult says a proposal is undecided (or its call unanswered) and
// how to ask again.
func pendingResult(id, state, request string) *mcp.CallToolResult {
	out := map[string]any{"proposal": id, "state": state,
		"next": "call proposal_wait with this proposal id to wait for its outcome, or pod_proposals to see it"}
	if request != "" {
		out["request"] = request
	}
	b, _ := json.Marshal(out)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{
		Text: fmt.Sprintf("You may not make this call yourself, so it was proposed (proposal %s): %s. %s", id, state, string(b))}}}
}
