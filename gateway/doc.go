// Package gateway is the MCPP pod gateway's server: the HTTP endpoints
// (/ws, POST /pods/NAME/envelopes, /mcp, the operator's API under
// /admin/, /healthz, /livez, /metrics and the pod viewer at /), who a
// request is (auth.go: the token file, JWTs and OAuth access tokens,
// package tokens), and the NATS node the pods' history and the other
// gateway nodes are reached through. The pods this node serves are its
// pod.Node's, which opens them, finds them and removes them: every way
// in (a WebSocket upgrade, a POST, an MCP session, the operator's kick
// and revoke) asks Node.Enter. What happens to an envelope once a
// participant sent it is package pod's.
//
// One node alone (the default) runs NATS inside the process with no port
// open and JetStream for the history: the pods' order is the node's own,
// the fan-out happens in process, and the history stream is written
// behind it in the same order. With --cluster-name (an embedded NATS
// cluster) or --nats-url (an external NATS), the nodes share the history
// stream and deliver in its order, each following it with one ordered
// consumer for all its pods; with history off they exchange envelopes on
// core NATS subjects.
//
// The parts, one concern per file:
//
//	gateway.go   New, Serve, Shutdown, the janitor; the pod.Node it fills
//	drain.go     a node's drain: on SIGTERM (Shutdown) or an operator's
//	config.go    every setting, as a flag and an MCPP_ environment variable;
//	             the limits are package limits' Config, which Config embeds
//	             and the pods take whole (newNode)
//	accept.go    the upgrade: its checks, answered in JSON, then the reader
//	publish.go   POST /pods/NAME/envelopes
//	auth.go      tokens, JWTs, refresh, expiry, revocation (SIGHUP)
//	oauth.go     the OAuth resource server: metadata, WWW-Authenticate
//	tls.go       HTTPS and WSS (--tls-cert, --tls-key), reloaded on SIGHUP and file change
//	mcpmount.go  what the MCP endpoint at /mcp (package mcpendpoint) takes of
//	             the gateway: who a request is, joining its pod
//	nats.go      the embedded NATS server (or the connection to an external one)
//	cluster.go   the other nodes of an embedded cluster
//	admin*.go    the operator's API: who may call it, its endpoints, its
//	             questions to the other nodes
//	metrics.go   /metrics
//	audit.go     the audit trail's joins and reloads (--audit-log, package audit)
//	tracing.go   the gateway's spans of joins (package tracing; an MCP host's
//	             requests are package mcpendpoint's)
//	viewer.go    the pod viewer (viewer/)
package gateway
