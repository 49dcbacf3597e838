package bridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpp/gateway/wire"
)

// The JSON-RPC messages as the bridge reads and writes them on the pod's
// side: a requester's request (the payload of its mcp/request), and the
// answer that goes back. The bridge reads only what it must change (the
// id, a progress token, a cancelled request's id) and passes the rest on
// as raw JSON.

// jsonrpcVersion is the jsonrpc field of every message.
const jsonrpcVersion = "2.0"

// The JSON-RPC errors the bridge answers itself, besides the server's
// own: the codes of JSON-RPC 2.0, and in the range it leaves to
// implementations, those of package wire (RPCConnectionClosed,
// RPCRequestTimeout) and this one.
const (
	// RPCTooManyInFlight: the bridge already has Config.MaxInFlight
	// requests at its server; data {"reason": ReasonTooManyInFlight,
	// "limit": N}. Retry later.
	RPCTooManyInFlight = -32003
	// ReasonTooManyInFlight is the data's reason of RPCTooManyInFlight.
	ReasonTooManyInFlight = "too_many_in_flight"
	// ReasonResponseTooLarge is the data's reason of the
	// jsonrpc.CodeInternalError answer that replaces a server's answer
	// too large for an envelope (the gateway's max_message_bytes).
	ReasonResponseTooLarge = "response_too_large"
)

// request is a JSON-RPC request or notification as a requester sent it.
type request struct {
	JSONRPC string
	ID      json.RawMessage // nil: a notification
	Method  *string
	Params  json.RawMessage
}

// errInvalidRequest is a payload that is not a JSON-RPC request.
var errInvalidRequest = errors.New("the payload is not a JSON-RPC 2.0 request")

// parseRequest reads an mcp/request's payload. A payload whose id could
// be read comes back with it even when it is refused, so that the
// refusal names it.
//
// The members are read by their exact names, and a payload that names
// one twice, or in two cases ("params" and "Params"), is refused: the
// gateway matched the capabilities' payload patterns key by key, case-
// sensitively, and Go's encoding/json, reading into a struct, would take
// the last of the copies that match ignoring case, which may be one the
// gateway did not check.
func parseRequest(payload []byte) (request, error) {
	members, err := topLevel(payload)
	if err != nil {
		return request{}, fmt.Errorf("%w: %v", errInvalidRequest, err)
	}
	var r request
	if id, ok := members["id"]; ok && !isNull(id) {
		if !validID(id) {
			return r, fmt.Errorf("%w: its id %s is neither a string nor a number", errInvalidRequest, id)
		}
		r.ID = id
	} else if ok {
		return r, fmt.Errorf("%w: its id is null", errInvalidRequest)
	}
	if v, ok := members["jsonrpc"]; !ok || json.Unmarshal(v, &r.JSONRPC) != nil || r.JSONRPC != jsonrpcVersion {
		return r, fmt.Errorf("%w: jsonrpc is not %q", errInvalidRequest, jsonrpcVersion)
	}
	v, ok := members["method"]
	if !ok {
		return r, fmt.Errorf("%w: it has no method (mcp/request carries requests, not answers)", errInvalidRequest)
	}
	if err := json.Unmarshal(v, &r.Method); err != nil || r.Method == nil {
		return r, fmt.Errorf("%w: its method is not a string", errInvalidRequest)
	}
	r.Params = members["params"]
	return r, nil
}

// rpcMembers are the members of a request the bridge reads.
var rpcMembers = []string{"jsonrpc", "id", "method", "params"}

// topLevel returns the members of the JSON object payload that the
// bridge reads, by their exact names, refusing an object that names one
// of them twice or in another case.
func topLevel(payload []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("it is not a JSON object")
	}
	out := map[string]json.RawMessage{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		for _, m := range rpcMembers {
			if !strings.EqualFold(key, m) {
				continue
			}
			if _, seen := out[m]; seen || key != m {
				return nil, fmt.Errorf("it names %q more than once, or in another case (%q): which one counts is ambiguous", m, key)
			}
			out[m] = v
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("something follows the JSON object")
	}
	return out, nil
}

// validID reports whether id is a JSON-RPC id MCP allows: a string or a
// number (not null).
func validID(id json.RawMessage) bool {
	id = bytes.TrimSpace(id)
	if len(id) == 0 {
		return false
	}
	switch c := id[0]; {
	case c == '"':
		var s string
		return json.Unmarshal(id, &s) == nil
	case c == '-' || c >= '0' && c <= '9':
		var n json.Number
		return json.Unmarshal(id, &n) == nil
	}
	return false
}

// answer is a JSON-RPC response as the bridge writes it to a requester.
type answer struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *jsonrpc.Error  `json:"error,omitempty"`
}

// serverAnswer is the server's response as it came, with the
// requester's id in place of the bridge's: the result, or the error's
// code, message and data, untouched.
func serverAnswer(id json.RawMessage, resp *jsonrpc.Response) json.RawMessage {
	a := answer{JSONRPC: jsonrpcVersion, ID: id}
	if resp.Error != nil {
		var we *jsonrpc.Error
		if !errors.As(resp.Error, &we) {
			we = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: resp.Error.Error()}
		}
		a.Error = we
	} else {
		a.Result = resp.Result
		if len(a.Result) == 0 {
			a.Result = json.RawMessage("null")
		}
	}
	return encode(a)
}

// errorAnswer is the bridge's own error answer to the request of id.
func errorAnswer(id json.RawMessage, code int64, message string, data any) json.RawMessage {
	if id == nil {
		id = json.RawMessage("null")
	}
	e := &jsonrpc.Error{Code: code, Message: message}
	if data != nil {
		e.Data = encode(data)
	}
	return encode(answer{JSONRPC: jsonrpcVersion, ID: id, Error: e})
}

// serverDownAnswer answers a request the server will not answer: it is
// not running, or it stopped while the request was in flight.
func serverDownAnswer(id json.RawMessage) json.RawMessage {
	return errorAnswer(id, wire.RPCConnectionClosed, "the MCP server is not running: mcpp bridge is restarting it",
		wire.RPCErrorData{Reason: wire.MCPReasonServerDown})
}

// tooManyData is the data of RPCTooManyInFlight.
type tooManyData struct {
	Reason string `json:"reason"`
	Limit  int    `json:"limit"`
}

// encode is json.Marshal without HTML escaping: an answer's text keeps its
// <, > and & as the server wrote them.
func encode(v any) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only the bridge's own values come here, and they encode.
		panic(fmt.Sprintf("bridge: encoding %T: %v", v, err))
	}
	return bytes.TrimRight(b.Bytes(), "\n")
}

// serverID is the id of the bridge's request number n, towards the
// server: the bridge numbers its requests itself, so that the ids of
// many requesters (each may use 1) cannot collide at the server.
func serverID(n int64) jsonrpc.ID {
	id, _ := jsonrpc.MakeID(float64(n)) // MakeID reads JSON's numbers as float64; n stays far below 2^53
	return id
}

// callNumber is the bridge's number of a response's id, and whether it is
// one of the bridge's.
func callNumber(id jsonrpc.ID) (int64, bool) {
	n, ok := id.Raw().(int64)
	return n, ok
}
