package mcpendpoint

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Completion of the arguments of the pod's MCP servers' prompts and
// resource templates (docs/protocol.md section 9): a host's
// completion/complete whose ref names a prompt it lists (SERVER__PROMPT)
// or a URI of a server's resource (a template's, as the host lists it)
// is the host's participant's completion/complete to that server, through
// the pod (ask.go), with the ref written as the server's; the result
// is the server's as it came. The gateway's own inbox has nothing to
// complete.

// complete is the member's server's CompletionHandler.
func (e *Endpoint) complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	m := memberOf(ctx)
	if m == nil || m.ended() {
		return nil, errSessionEnded
	}
	ref := req.Params.Ref
	var server string
	var serverRef map[string]string
	switch ref.Type {
	case "ref/prompt":
		sp, ok := m.listedPrompt(ref.Name)
		if !ok {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown prompt %q", ref.Name)}
		}
		server, serverRef = sp.server, map[string]string{"type": ref.Type, "name": sp.name}
	case "ref/resource":
		s, uri, ok := m.serverResourceOf(ref.URI)
		if !ok {
			if _, _, inbox := parseInbox(ref.URI); inbox || ref.URI == inboxTemplate {
				return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{}}}, nil
			}
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
				Message: fmt.Sprintf("%q is neither the inbox nor a resource of one of the pod's MCP servers (mcpp://pods/POD/servers/SERVER/…)", ref.URI)}
		}
		server, serverRef = s, map[string]string{"type": ref.Type, "uri": uri}
	default:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown reference type %q", ref.Type)}
	}
	params := map[string]any{"ref": serverRef, "argument": req.Params.Argument}
	if req.Params.Context != nil {
		params["context"] = req.Params.Context
	}
	raw, err := m.ask(ctx, server, "completion/complete", params)
	if err != nil {
		return nil, err
	}
	var res mcp.CompleteResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, notOfKind(server, "a completion", raw, err)
	}
	return &res, nil
}
