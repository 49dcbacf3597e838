package bridge

import (
	"context"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// A server may ask things of its client: sampling/createMessage (an LLM
// completion), elicitation/create (a question to the user), roots/list
// (the user's folders), ping. The bridge is a client with no model, no
// user and no folders, and it says so at initialize by declaring no
// capabilities; a server that asks anyway gets what a client without the
// capability answers: -32601, method not found, as the MCP TypeScript
// SDK's client answers a request it has no handler for. (The Go SDK's
// client answers sampling with -32001 and elicitation with -32602, codes
// its own source calls wrong and SDK-specific.) ping is answered, as
// every MCP peer must.
//
// Passing these requests on to the pod, for a participant to answer, is
// for later: who would answer, and how the server's wait would be
// bounded, are questions of their own.

// methodNotFound is JSON-RPC's method-not-found error, as the TypeScript
// SDK writes it.
var methodNotFound = &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "Method not found"}

// answerServerRequest answers a request the server made of the bridge.
func (s *session) answerServerRequest(req *jsonrpc.Request) {
	resp := &jsonrpc.Response{ID: req.ID}
	if req.Method == "ping" {
		resp.Result = json.RawMessage("{}")
	} else {
		resp.Error = methodNotFound
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.b.cfg.PingTimeout)
	defer cancel()
	_ = s.write(ctx, resp) // a failure ends the session, which says why
}
