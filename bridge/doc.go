// Package bridge puts an MCP server in a pod: it joins the pod as a
// participant that serves MCP, and answers each mcp/request addressed to
// it with its server's answer. It is what `mcpp bridge` runs, and it is
// built on the official Go MCP SDK (its transports and its jsonrpc
// package) and this repository's Go client (package client), whose
// reconnection and resumption it relies on.
//
//	b, err := bridge.New(bridge.Config{
//		Gateway: "ws://127.0.0.1:8080/ws",
//		Client:  client.Options{Pod: "lab", Participant: "everything"},
//		Server:  bridge.Server{Command: []string{"npx", "-y", "@modelcontextprotocol/server-everything@2026.8.31"}},
//	})
//	if err != nil {
//		return err
//	}
//	return b.Run(ctx) // until ctx ends, or the pod's connection ends for good
//
// The files follow a request through: bridge.go joins the pod and reads
// its events; requests.go takes a request to the server, inflight.go
// keeps it until it is answered, session.go is the connection to the
// server (serverrequests.go answers what the server asks of its client,
// notifications.go takes its notifications to the pod, events.go reads a
// Streamable HTTP server's event stream), outbox.go sends the answers,
// and restart.go starts the server again when it stops.
//
// # On the pod's side
//
// The bridge joins with ?serves=mcp (client.Options.Serves), so that
// welcomes and presence events list it among the participants that serve
// MCP, and with routing=directed: of the pod's addressed envelopes it
// receives only those addressed to it. Its capabilities must allow it to
// send mcp/response* (mcp/response, and MCPx's mcp/response:METHOD forms,
// for requests of those kinds) and mcp/notification; it sends nothing
// else. A token for a bridge:
//
//	{"token": "…", "participant": "everything", "capabilities": ["mcp/response*", "mcp/notification"]}
//
// # A request
//
// An mcp/request's payload is a JSON-RPC request as MCP has it:
//
//	{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": "hi"}}}
//
// The bridge sends it to the server under an id of its own, a number it
// never reuses: every requester chooses its ids, and two may choose the
// same. The server's answer goes back as an mcp/response to the requester
// alone (to: [requester]), correlation_id the request's envelope id, in
// the request's context when it had one; its payload is the server's
// JSON-RPC answer as it came, with the requester's id put back: the
// result, or the error's code, message and data, untouched. Any method
// is passed on (tools/list, tools/call, resources/list,
// resources/templates/list, resources/read, prompts/list, prompts/get,
// ping, completion/complete, and whatever else the server answers),
// except initialize, which the bridge made itself: a requester who asks
// gets the server's answer to it. A request whose payload is a JSON-RPC
// notification (no id) is passed on and not answered; a requester's
// notifications/cancelled has its request's id replaced by the bridge's.
//
// A requester's progress token (params._meta.progressToken) is replaced
// in the same way, by the bridge's id for the request, and the server's
// notifications/progress about the call go to that requester alone,
// correlated to its request, with its own token back: progress is part
// of the answer, and goes where the answer goes. Every other notification
// of the server (tools/list_changed, resources/updated, log messages)
// goes to the whole pod as an mcp/notification, the notification as it
// came.
//
// # Raw JSON-RPC, not the SDK's typed client
//
// The SDK's mcp.Client has a typed method for each request (CallTool,
// ListTools…): each decodes the server's answer into Go types and the
// bridge would encode it again, dropping what the types do not know (a
// newer revision's fields, a server's own) and knowing nothing of the
// methods it has no method for. The bridge uses the SDK one layer down:
// a Transport (mcp.CommandTransport for stdio, mcp.StreamableClientTransport
// for Streamable HTTP) gives a Connection of jsonrpc.Message values whose
// params and results are raw JSON, and the bridge makes MCP's initialize
// handshake itself, asking for protocol revision 2025-11-25. What that
// costs, the bridge does here: the Streamable HTTP transport sets the
// Mcp-Protocol-Version header, and opens the server's event stream (the
// GET that carries notifications outside a request), only for sessions
// its own Client initialized; transport.go sets the header and events.go
// opens and reads the stream.
//
// # What the server asks of its client
//
// The bridge has no model, no user and no folders: it declares no client
// capabilities at initialize, and a server that asks anyway
// (sampling/createMessage, elicitation/create, roots/list) gets -32601
// method not found, what a client without the capability answers (the
// TypeScript SDK's client, for one). A server's ping is answered.
//
// # When the server stops
//
// A server that exits, whose connection fails, or that does not answer a
// ping (every Config.PingInterval) within Config.PingTimeout, is started
// again: after Config.MinRestartDelay (0.5 s), then twice as long after
// each failure in a row up to Config.MaxRestartDelay (30 s), each wait
// drawn between half of it and all of it; a server that ran 30 s starts
// from 0.5 s again. The requests it had not answered, and every request
// that comes while it is down, are answered at once with the error of
// package wire:
//
//	{"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "the MCP server is not running: mcpp bridge is restarting it",
//	 "data": {"reason": "server_down"}}}
//
// # Bounds
//
// At most Config.MaxInFlight requests (256) wait for the server at once;
// one more is answered at once with RPCTooManyInFlight (-32003, data
// {"reason": "too_many_in_flight", "limit": 256}). One that waits longer
// than Config.RequestTimeout (2 min) is answered with wire's
// RPCRequestTimeout (-32001, reason timeout) and cancelled at the server.
// An answer too large for the gateway's max_message_bytes becomes a
// -32603 error with reason response_too_large. The bridge's envelopes go
// out no faster than the gateway's rate limit allows (outbox.go), so
// that none is refused for its rate. A Streamable HTTP server that
// refuses one request with an HTTP status is answered as that request's
// error (-32600 with the server's reason), and its session goes on
// (httprefusals.go).
//
// # Stopping
//
// When Run's context ends, the bridge answers the requests in flight
// (server_down), stops the server (a command's standard input is closed,
// then SIGTERM, then SIGKILL after 5 s each; a Streamable HTTP session is
// deleted) and leaves the pod. A command runs in a process group of its
// own, so that a terminal's Ctrl-C reaches the bridge, which stops it in
// that order, and not the server first.
package bridge
