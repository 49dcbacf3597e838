// Package mcpendpoint is the gateway's MCP endpoint (docs/protocol.md
// section 9): /mcp?pod=NAME is a Model Context Protocol server over
// Streamable HTTP, built on the official Go SDK, so that an LLM host or
// an IDE agent takes part in a pod with no client library of ours. The
// host's participant is a member of the pod with no connection of its own
// (a guest, pod/members.go), and what its tools do, they do as that
// participant, under its capabilities and rates, as a WebSocket
// participant's envelopes are done.
//
// Use New to build the handler, giving it what it needs of the gateway
// that mounts it (Gateway), and mount it at /mcp:
//
//	e := mcpendpoint.New(mcpendpoint.Gateway{
//		Node:           node,               // the pods' shared node (pod.Node)
//		SessionTimeout: 30 * time.Minute,   // --mcp-session-timeout
//		Admit:          admit,              // who a request is, or its refusal written
//		Refuse:         refuse,             // a join refused after Admit, recorded
//		Join:           join,               // the one way to find a pod and enter it
//		Left:           left,               // what Join took, given back
//		// Version, NodeID, Tracer, Log, LocalhostProtection
//	})
//	node.OnServers = e.ServersChanged       // the pods' MCP servers come, go, change
//	mux.Handle("/mcp", e)
//
// and tell it of the gateway's life: EndExpired every second (tokens that
// expired), EndRevoked when the tokens are reloaded, Shutdown when the
// gateway begins to drain. Package gateway does all this in
// gateway/mcpmount.go; the tests of this package do it with a pod of
// their own (helpers_test.go), which is the shortest way to read the
// contract.
//
// # A request's path
//
//	HTTP request → ServeHTTP: Gateway.Admit, as /ws is admitted; bind the
//	  MCP session to its participant, find or start the participant's
//	  member (member.go: Gateway.Join on its first request)
//	  → the SDK's handler (with sessions, or without for 2026-07-28 clients)
//	  → traced: the host's _meta.traceparent, MCP's server span (tracing.go)
//	  → middleware: the member into the context, refusals in the protocol's shape
//	  → a tool of the gateway's (tools.go): relays through the pod's ingress
//	    like /ws (relay.go), or reads the pod's history through the
//	    member's cursor (read.go)
//	  → or a tool of one of the pod's MCP servers (SERVER__TOOL): the
//	    participant's mcp/request to the server, or its mcp/proposal when
//	    it may only propose the call (calls.go, proposals.go)
//
// One member per participant and pod on a node holds what its sessions
// share: presence, filter, rate buckets, the read cursor, the tools it
// lists. Nothing is queued for it, so a member that never reads holds no
// more memory than one that does. It ends when its last session ends,
// when it has been idle for --mcp-session-timeout, when a newer member of
// its participant replaces it (on any node), or when the gateway drains.
//
// # What a host sees
//
// The gateway's own tools (pod_read, pod_send, context_branch, …, the
// proposals' tools), the inbox resource (inbox.go), and the tools,
// prompts and resources of the pod's MCP servers, learnt by asking each
// server (servers.go, prompts.go, resources.go). A server's tool is
// listed as SERVER__TOOL (exposedName: the participant id with its bytes
// outside MCP's name characters and its "_" written _HH, "__", the tool's
// name escaped the same way but for "_"), and only where the host's
// capabilities let it make the call or propose it. A refused call is an
// error result carrying the system/error payload a WebSocket participant
// would get: {"error": CODE, "message": TEXT, "retryable": …}.
//
// # Files
//
//	gateway.go        Gateway and Admission: all the endpoint takes of the gateway
//	endpoint.go       New, ServeHTTP, the SDK's servers and handlers, the middleware
//	member.go         a participant's membership: start, hold, idle, end
//	tools.go          the gateway's tools and how a refusal is said
//	types.go, schema.go  the tools' arguments and results, and their schemas
//	relay.go          the tools that send, through the pod's ingress
//	read.go           pod_read's cursor over the history
//	servers.go        the servers' tools: discovery, names, listing by capability
//	calls.go          a host's call of a server's tool, its progress and questions
//	proposals.go      pod_proposals, proposal_wait, proposal_approve
//	tasks.go          MCP tasks of the servers' tools
//	resources.go, prompts.go, subscriptions.go, complete.go, ask.go
//	                  the servers' resources and prompts, through the pod
//	inbox.go          the participant's inbox as a resource
//	tracing.go        MCP's server span of a host's request
//
// The package may import pod, participant, wire, capability, audit,
// tracing and the other leaves of the module, never package gateway.
package mcpendpoint
