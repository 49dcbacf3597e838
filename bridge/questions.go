package bridge

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/wire"
)

// A server asks its client things while it handles a call: a question to
// the user (elicitation/create, in form or URL mode), as a request of its
// own, or, in MCP 2026-07-28, as input requests in the call's result
// (inputs.go). The bridge has no user: it asks the participant whose call
// caused the question, and nobody else. The question is an mcp/request of
// the bridge's, to that requester alone, correlated to the requester's
// own request, in that call's context, its payload the server's JSON-RPC
// request as it came with an id of the bridge's:
//
//	{"kind": "mcp/request", "to": ["alice"], "correlation_id": "r-1",
//	 "payload": {"jsonrpc": "2.0", "id": 17, "method": "elicitation/create", "params": {…}}}
//
// The requester answers it as it answers any request, with an
// mcp/response correlated to the question's envelope; the answer's
// result (or error) goes back to the server. The gateway vouches for the
// question as for every call (its requester absent, gone or silent: an
// error answer of the gateway's, which the server gets as the answer).
// A question ends with its call: when the call is answered, cancelled or
// timed out first, the server is answered with RPCNoCaller
// (ReasonCallEnded) and the requester is told the question is cancelled
// (notifications/cancelled).

// The errors a server's question may get from the bridge itself (each
// with data {"reason": …}).
const (
	// RPCNoCaller: the question belongs to no call the bridge can name
	// (ReasonNoCallInFlight, ReasonAmbiguousCaller, ReasonNoCaller), or its
	// call ended before it was answered (ReasonCallEnded).
	RPCNoCaller = -32004
	// ReasonNoCallInFlight: over stdio, no call is in flight at the server.
	ReasonNoCallInFlight = "no_call_in_flight"
	// ReasonAmbiguousCaller: over stdio, several calls are in flight and
	// nothing in the request says which it belongs to: the bridge never
	// guesses.
	ReasonAmbiguousCaller = "ambiguous_caller"
	// ReasonNoCaller: a Streamable HTTP server asked on its event stream,
	// outside any call.
	ReasonNoCaller = "no_caller"
	// ReasonCallEnded: the call ended before its question was answered.
	ReasonCallEnded = "call_ended"
	// ReasonTooManyQuestions (with RPCTooManyInFlight): the call has
	// maxQuestionsPerCall questions waiting already.
	ReasonTooManyQuestions = "too_many_questions"
	// ReasonBadAnswer (with jsonrpc.CodeInternalError): the requester's
	// answer was not a JSON-RPC response to the question.
	ReasonBadAnswer = "bad_answer"
)

// maxQuestionsPerCall bounds the questions of one call waiting for their
// answers: a server that floods its caller with questions is answered
// RPCTooManyInFlight past it. Every question is also an mcp/request in
// flight at the gateway, within its bounds.
const maxQuestionsPerCall = 8

// question is one question waiting for its requester's answer.
type question struct {
	envID  string // the question's envelope id: the answer is correlated to it
	n      int64  // its JSON-RPC id at the requester, a number of the bridge's
	c      *call  // the call that caused it
	method string
	// done takes the answer: the requester's result, or an error (the
	// requester's, the gateway's, or the bridge's).
	done  func(result json.RawMessage, err *jsonrpc.Error)
	timer *time.Timer
	// elicitation is a URL-mode question's elicitationId: the server's
	// notifications/elicitation/complete about it goes to the requester.
	elicitation string
}

// questionTable holds the questions waiting for their answers.
type questionTable struct {
	mu      sync.Mutex
	byEnv   map[string]*question
	perCall map[*call]int
	// elicitations are the URL-mode questions' requesters, by
	// elicitationId, until the server says the elicitation is complete
	// (or maxElicitations newer ones came).
	elicitations map[string]*call
}

// maxElicitations bounds the URL-mode elicitations remembered.
const maxElicitations = 1024

func newQuestionTable() *questionTable {
	return &questionTable{byEnv: map[string]*question{}, perCall: map[*call]int{}, elicitations: map[string]*call{}}
}

// ask asks c's requester what the server asks (method, params), and hands
// the answer to done, once. It returns the error the server is to get at
// once instead when the call has too many questions waiting.
func (b *Bridge) ask(c *call, method string, params json.RawMessage, done func(json.RawMessage, *jsonrpc.Error)) *jsonrpc.Error {
	t := b.questions
	q := &question{envID: uuid.NewString(), n: b.nextNumber(), c: c, method: method, done: done}
	if method == "elicitation/create" {
		var p struct {
			Mode          string `json:"mode"`
			ElicitationID string `json:"elicitationId"`
		}
		if json.Unmarshal(params, &p) == nil && p.Mode == "url" {
			q.elicitation = p.ElicitationID
		}
	}
	t.mu.Lock()
	if t.perCall[c] >= maxQuestionsPerCall {
		t.mu.Unlock()
		return &jsonrpc.Error{Code: RPCTooManyInFlight, Message: fmt.Sprintf("the call already has %d questions waiting for its caller's answers", maxQuestionsPerCall),
			Data: encode(tooManyData{Reason: ReasonTooManyQuestions, Limit: maxQuestionsPerCall})}
	}
	t.perCall[c]++
	t.byEnv[q.envID] = q
	if q.elicitation != "" {
		if len(t.elicitations) >= maxElicitations {
			clear(t.elicitations)
		}
		t.elicitations[q.elicitation] = c
	}
	q.timer = time.AfterFunc(b.cfg.RequestTimeout, func() {
		if q := b.takeQuestion(q.envID); q != nil {
			d := b.cfg.RequestTimeout
			q.done(nil, &jsonrpc.Error{Code: wire.RPCRequestTimeout, Message: fmt.Sprintf("%s did not answer within %v", q.c.requester, d),
				Data: encode(wire.RPCErrorData{Reason: wire.MCPReasonTimeout, TimeoutMS: d.Milliseconds()})})
		}
	})
	t.mu.Unlock()
	payload := encode(map[string]any{"jsonrpc": jsonrpcVersion, "id": q.n, "method": method, "params": rawOrEmpty(params)})
	b.out.send(&wire.Envelope{ID: q.envID, Kind: wire.KindMCPRequest, To: []string{c.requester},
		CorrelationID: wire.CorrelationID{c.envID}, Context: c.context, Payload: payload})
	return nil
}

func rawOrEmpty(params json.RawMessage) json.RawMessage {
	if len(params) == 0 {
		return json.RawMessage("{}")
	}
	return params
}

// takeQuestion takes the question of envelope id out, or returns nil.
func (b *Bridge) takeQuestion(envID string) *question {
	t := b.questions
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.byEnv[envID]
	if q == nil {
		return nil
	}
	delete(t.byEnv, envID)
	if t.perCall[q.c]--; t.perCall[q.c] <= 0 {
		delete(t.perCall, q.c)
	}
	q.timer.Stop()
	return q
}

// answeredQuestion takes a requester's answer to a question (an
// mcp/response to the bridge, correlated to the question's envelope) to
// whoever waits for it; the gateway's own answer for a requester that is
// gone or silent comes the same way.
func (b *Bridge) answeredQuestion(env *wire.Envelope) {
	if len(env.CorrelationID) != 1 {
		return
	}
	q := b.takeQuestion(env.CorrelationID[0])
	if q == nil {
		return // answered, ended or timed out already: the gateway refused a second answer
	}
	var a struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  json.RawMessage `json:"result"`
		Error   *jsonrpc.Error  `json:"error"`
	}
	err := json.Unmarshal(env.Payload, &a)
	n, isNumber := tokenNumber(a.ID)
	switch {
	case err != nil || a.JSONRPC != jsonrpcVersion || (a.Result == nil) == (a.Error == nil):
		q.done(nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("%s's answer to the question is not a JSON-RPC response", q.c.requester),
			Data: encode(map[string]string{"reason": ReasonBadAnswer})})
	case env.From != wire.GatewayID && (!isNumber || n != q.n):
		q.done(nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("%s answered the question with id %s, not %d", q.c.requester, a.ID, q.n),
			Data: encode(map[string]string{"reason": ReasonBadAnswer})})
	case a.Error != nil:
		q.done(nil, a.Error)
	default:
		q.done(a.Result, nil)
	}
}

// refusedQuestion answers the server at once for a question the gateway
// refused (the bridge's capabilities do not allow it, its caller left
// meanwhile): with the refusal's code and message, data {"reason": CODE}.
func (b *Bridge) refusedQuestion(ge *client.GatewayError) {
	q := b.takeQuestion(ge.RefusedID())
	if q == nil {
		return
	}
	q.done(nil, &jsonrpc.Error{Code: RPCNoCaller, Message: "the gateway refused the question to " + q.c.requester + ": " + ge.Message,
		Data: encode(map[string]string{"reason": string(ge.Code)})})
}

// endQuestions ends the questions of a call that left: the server gets
// RPCNoCaller (call_ended) for each, and the requester is told each is
// cancelled.
func (b *Bridge) endQuestions(c *call) {
	t := b.questions
	t.mu.Lock()
	var ended []*question
	if t.perCall[c] > 0 {
		for id, q := range t.byEnv {
			if q.c == c {
				delete(t.byEnv, id)
				q.timer.Stop()
				ended = append(ended, q)
			}
		}
		delete(t.perCall, c)
	}
	t.mu.Unlock()
	for _, q := range ended {
		q.done(nil, &jsonrpc.Error{Code: RPCNoCaller, Message: "the call this question was asked for ended before its caller answered",
			Data: encode(map[string]string{"reason": ReasonCallEnded})})
		b.out.send(&wire.Envelope{Kind: wire.KindMCPRequest, To: []string{c.requester}, Context: c.context,
			Payload: encode(map[string]any{"jsonrpc": jsonrpcVersion, "method": "notifications/cancelled",
				"params": map[string]any{"requestId": q.n, "reason": "the call it was asked for ended"}})})
	}
}

// elicitationCaller is the call of a URL-mode elicitation, and forgets it
// (the server said it is complete).
func (b *Bridge) elicitationCaller(id string) *call {
	t := b.questions
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.elicitations[id]
	delete(t.elicitations, id)
	return c
}
