package bridge

import (
	"context"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// A server may ask things of its client: elicitation/create (a question
// to the user), sampling/createMessage (an LLM completion), roots/list
// (the user's folders), ping. The bridge offers elicitation (handshake.go)
// and passes each question to the participant whose call caused it
// (questions.go): the call whose stream carried it (Streamable HTTP,
// streams.go), the call of the task it names (its
// _meta["io.modelcontextprotocol/related-task"], tasks.go), or, over
// stdio, the one call in flight at the server. With several in flight
// and nothing to say which, it never guesses: the server gets
// RPCNoCaller (ReasonAmbiguousCaller). The bridge has no model and no
// folders: sampling/createMessage and roots/list get -32601, method not
// found, as a client without them answers (the MCP TypeScript SDK's
// client; the Go SDK's answers sampling with -32001 and elicitation with
// -32602, codes its own source calls wrong). ping is answered, as every
// MCP peer must.

// methodNotFound is JSON-RPC's method-not-found error, as the TypeScript
// SDK writes it.
var methodNotFound = &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "Method not found"}

// answerServerRequest answers a request the server made of the bridge.
func (s *session) answerServerRequest(req *jsonrpc.Request) {
	switch req.Method {
	case "ping":
		s.reply(req.ID, json.RawMessage("{}"), nil)
	case "elicitation/create":
		c, refusal := s.callerOf(req)
		if refusal != nil {
			s.reply(req.ID, nil, refusal)
			return
		}
		if e := s.b.ask(c, req.Method, req.Params, func(result json.RawMessage, err *jsonrpc.Error) {
			s.reply(req.ID, result, err)
		}); e != nil {
			s.reply(req.ID, nil, e)
		}
	default:
		s.reply(req.ID, nil, methodNotFound)
	}
}

// reply answers the server's request id with result, or err.
func (s *session) reply(id jsonrpc.ID, result json.RawMessage, err *jsonrpc.Error) {
	resp := &jsonrpc.Response{ID: id, Result: result}
	if err != nil {
		resp.Result, resp.Error = nil, err
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.b.cfg.PingTimeout)
	defer cancel()
	_ = s.write(ctx, resp) // a failure ends the session, which says why
}

// callerOf is the call a server's request belongs to, or the error the
// server gets when the bridge cannot name one.
func (s *session) callerOf(req *jsonrpc.Request) (*call, *jsonrpc.Error) {
	b := s.b
	if n, ok := s.streams.take(encode(req.ID.Raw())); ok {
		if c := b.calls.get(n); c != nil {
			return c, nil
		}
		return nil, noCaller(ReasonCallEnded, "the call whose stream carried this request has ended")
	}
	if task := relatedTask(req.Params); task != "" {
		if c := b.tasks.callOf(b.calls, s, task); c != nil {
			return c, nil
		}
		return nil, noCaller(ReasonNoCallInFlight, "no call of the participant whose task this is is in flight (it asks for the task's result with tasks/result)")
	}
	if s.hc != nil {
		return nil, noCaller(ReasonNoCaller, "a request on the event stream belongs to no call")
	}
	in := b.calls.ofSession(s)
	switch len(in) {
	case 0:
		return nil, noCaller(ReasonNoCallInFlight, "no call is in flight at this server")
	case 1:
		return in[0], nil
	}
	return nil, noCaller(ReasonAmbiguousCaller, "several calls are in flight at this server, and nothing in the request says which it belongs to")
}

func noCaller(reason, why string) *jsonrpc.Error {
	return &jsonrpc.Error{Code: RPCNoCaller, Message: "mcpp bridge cannot ask this: " + why, Data: encode(map[string]string{"reason": reason})}
}

// relatedTask is the task a server's request names in
// params._meta["io.modelcontextprotocol/related-task"].taskId, or "".
func relatedTask(params json.RawMessage) string {
	meta, _ := object(member(params, "_meta"))
	var rt struct {
		TaskID string `json:"taskId"`
	}
	if json.Unmarshal(meta[metaRelatedTask], &rt) != nil {
		return ""
	}
	return rt.TaskID
}
