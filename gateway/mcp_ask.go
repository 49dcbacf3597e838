package gateway

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/tidwall/gjson"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/wire"
)

// A host's requests of the pod's MCP servers other than tool calls
// (docs/protocol.md section 9): reading a resource, getting a prompt,
// subscribing to a resource and completing an argument are each the
// host's participant's mcp/request to the server, through the pod like any
// envelope of it (capabilities, rates, --max-mcp-requests-*, the history),
// in the sub-context it opened last, as its tool calls are. Unlike a tool
// call, none becomes a proposal: their results have no way to say "still
// pending", so a host that may not make the request is refused.

// rpcRefused is the JSON-RPC error code of a host's request that the pod
// refused (its data is the refusal: {"error": CODE, "message", …}).
const rpcRefused = -32000

// ask sends the member's request of method, with params, to server and
// returns the server's result as it came. The server's JSON-RPC error (or
// the gateway's, for a server that left or did not answer within
// --mcp-request-timeout) is returned as it came, a *jsonrpc.Error; a
// refusal of the pod is a *jsonrpc.Error of rpcRefused.
func (m *mcpMember) ask(ctx context.Context, server, method string, params any) (json.RawMessage, error) {
	if m == nil || m.ended() {
		return nil, errSessionEnded
	}
	payload, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": uuid.NewString(), "method": method, "params": params})
	if err != nil {
		return nil, refusalError(refuse(envelope.Errorf(wire.CodeInvalidEnvelope, "the request does not marshal: %v", err)))
	}
	out := outgoing{ID: uuid.NewString(), Kind: wire.KindMCPRequest, To: []string{server}, Payload: payload, Trace: traceField(ctx)}
	if cx := m.branch(); cx != "" {
		out.Context = wire.Context{ID: cx}.JSON()
	}
	answer := m.pod.Await(out.ID, m.id)
	if _, err := m.relay(out); err != nil {
		m.pod.Forget(out.ID, answer)
		var no refused
		if errors.As(err, &no) {
			return nil, refusalError(no)
		}
		return nil, err
	}
	select {
	case body := <-answer:
		p := gjson.GetBytes(body, "payload")
		if r := p.Get("result"); r.Exists() {
			return json.RawMessage(r.Raw), nil
		}
		e := p.Get("error")
		rpc := &jsonrpc.Error{Code: e.Get("code").Int(), Message: e.Get("message").String()}
		if d := e.Get("data"); d.Exists() {
			rpc.Data = json.RawMessage(d.Raw)
		}
		return nil, rpc
	case <-ctx.Done():
		m.pod.Forget(out.ID, answer)
		return nil, ctx.Err()
	case <-m.done:
		m.pod.Forget(out.ID, answer)
		return nil, errSessionEnded
	}
}

// refusalError is a refusal as a JSON-RPC error: rpcRefused, the
// refusal's message, and the system/error payload as data.
func refusalError(r refused) error {
	data, err := json.Marshal(r.payload)
	if err != nil {
		data = nil // never: Payload's details are JSON
	}
	return &jsonrpc.Error{Code: rpcRefused, Message: string(r.payload.Code) + ": " + r.payload.Message, Data: data}
}
