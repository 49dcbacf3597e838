package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// In MCP 2026-07-28 a server that needs something of its client while it
// handles a call (tools/call, prompts/get, resources/read) does not ask
// with a request of its own: it answers the call with what it needs,
//
//	{"resultType": "input_required", "requestState": "…",
//	 "inputRequests": {"q1": {"method": "elicitation/create", "params": {…}}}}
//
// and the client sends the call again with the answers
// (params.inputResponses, keyed as the requests were, and requestState
// echoed). The bridge asks each input request of the call's requester as
// the question it would have been in an older revision (questions.go), so
// that a requester sees one shape whatever revision the server speaks,
// and sends the call again once all are answered; the requester gets the
// final answer alone. An input request the bridge does not offer
// (sampling, roots), an error answer, or more than maxInputRounds rounds
// end the call with an error to its requester.

// maxInputRounds bounds how many times one call is sent again with input,
// as the SDK's client bounds it.
const maxInputRounds = 10

// ReasonInputRequest is the data's reason of the error that ends a call
// whose server asked for input the bridge does not offer, or whose
// requester answered a question with an error.
const ReasonInputRequest = "input_request_failed"

// needsInput reports whether result (the answer to call c, sent as request
// n) asks for input; when it does, it asks c's requester and sends c again
// once every question is answered.
func (b *Bridge) needsInput(c *call, n int64, result json.RawMessage) bool {
	var r struct {
		ResultType    string `json:"resultType"`
		InputRequests map[string]struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		} `json:"inputRequests"`
		RequestState *string `json:"requestState"`
	}
	if json.Unmarshal(result, &r) != nil || r.ResultType != "input_required" {
		return false
	}
	if c.rounds++; c.rounds > maxInputRounds {
		b.failInput(c, n, fmt.Sprintf("the MCP server asked for input more than %d times", maxInputRounds))
		return true
	}
	round := &inputRound{b: b, c: c, n: n, left: len(r.InputRequests), responses: map[string]json.RawMessage{}, state: r.RequestState}
	if round.left == 0 {
		round.resend() // the server is busy: send the call again as it says
		return true
	}
	if len(r.InputRequests) > maxQuestionsPerCall {
		b.failInput(c, n, fmt.Sprintf("the MCP server asked %d questions at once, more than the %d a call may have waiting (%s)",
			len(r.InputRequests), maxQuestionsPerCall, ReasonTooManyQuestions))
		return true
	}
	for _, ir := range r.InputRequests {
		if ir.Method != "elicitation/create" {
			b.failInput(c, n, fmt.Sprintf("the MCP server asked for %s, which mcpp bridge does not offer", ir.Method))
			return true
		}
	}
	for key, ir := range r.InputRequests {
		if e := b.ask(c, ir.Method, ir.Params, func(res json.RawMessage, err *jsonrpc.Error) { round.answered(key, res, err) }); e != nil {
			round.answered(key, nil, e)
		}
	}
	return true
}

// failInput ends call c (sent as request n) with an error of its input.
func (b *Bridge) failInput(c *call, n int64, why string) {
	if b.calls.take(n) != c {
		return
	}
	b.endQuestions(c)
	b.answer(c, errorAnswer(c.id, jsonrpc.CodeInternalError, why, map[string]string{"reason": ReasonInputRequest}))
}

// inputRound is the answers to one input_required result of a call.
type inputRound struct {
	b         *Bridge
	c         *call
	n         int64 // the request that was answered input_required
	state     *string
	mu        sync.Mutex
	left      int
	responses map[string]json.RawMessage
	failed    *jsonrpc.Error
}

// answered takes one answer; the last sends the call again, or ends it
// when one of them was an error.
func (r *inputRound) answered(key string, res json.RawMessage, err *jsonrpc.Error) {
	r.mu.Lock()
	if err != nil && r.failed == nil {
		r.failed = err
	}
	r.responses[key] = res
	r.left--
	last := r.left == 0
	r.mu.Unlock()
	if !last {
		return
	}
	if r.failed != nil {
		if r.b.calls.take(r.n) == r.c {
			r.b.endQuestions(r.c)
			r.b.answer(r.c, errorAnswer(r.c.id, r.failed.Code, r.failed.Message, map[string]any{"reason": ReasonInputRequest, "answer": r.failed}))
		}
		return
	}
	r.resend()
}

// resend sends the call again, with the answers and the server's state.
func (r *inputRound) resend() {
	b, c := r.b, r.c
	params := withMember(c.params, "inputResponses", encode(r.responses))
	if r.state != nil {
		params = withMember(params, "requestState", encode(*r.state))
	}
	m := b.nextNumber()
	ctx, stop := context.WithCancel(c.sess.ctx)
	if !b.calls.renumber(c, m, stop) {
		stop()
		return
	}
	go b.send(ctx, c, m, params)
}
