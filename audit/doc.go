// Package audit writes the gateway's audit trail: one JSON object a line
// for every trust decision a gateway node makes (docs/protocol.md section
// 7, "The audit log"). A team that runs agents in production asks of it
// who was allowed or refused what, and who approved it; the pods' history
// cannot answer that (it is bounded, folded, and holds what was said, not
// what was decided).
//
// # What is a trust decision
//
// Each line names one in its decision field (the Decision constants):
//
//	join, join_refused            a participant comes in (WebSocket, MCP, HTTP publish, observe), or is kept out
//	capability_refused            an envelope or request refused for what its sender may do, with the rule broken
//	grant, revoke                 capabilities given or taken back while the pod runs (capability/grant, /revoke)
//	kick, ban                     a participant removed (gateway/kick), and kept out until a time
//	refresh, refresh_refused      a connection's fresh token (gateway/refresh)
//	proposal, proposal_approved,  a proposed call (mcp/proposal) and how it ended: who approved it, once or
//	proposal_rejected, …          always, the digest of the exact bytes released
//	tokens_reloaded, tls_reloaded what a reload changed, and who it disconnected
//
// Every line has ts (RFC 3339, UTC, milliseconds), node (the gateway node
// that decided) and decision; the other fields are those the decision
// has (Record). A token is never written: a token of the token file is
// named by its participant and the first 16 hex digits of its SHA-256, a
// JWT by its iss, kid and jti and the same short hash.
//
// # Never in the way of delivery
//
// A decision is made on the path of an envelope (a refusal, a grant) or
// of a join, and the disk may be slow, full or gone. So Record only puts
// the record on a bounded queue (QueueLength) and returns; one goroutine
// of the Log encodes the records and writes whole lines, many at a time.
// When the queue is full the record is dropped and counted (Dropped),
// and so is every line of a write that failed: the gateway serves
// /metrics mcpp_audit_dropped_total{reason} from them, so that a gap in
// the trail is seen, never a pause in the pods.
//
//	log, err := audit.Open(audit.Options{Path: "/var/log/mcpp/audit.log", Node: nodeID})
//	...
//	log.Record(audit.Record{Decision: audit.Kick, Pod: "lab", Participant: "bot", By: "alice", Reason: "looping"})
//	...
//	log.Close(ctx) // writes what is queued, until ctx ends
//
// A file is rotated by size with gopkg.in/natefinch/lumberjack.v2
// (Options.MaxSizeMB, Options.MaxBackups); each node of a cluster writes
// its own file. Path "-" writes to standard output, for a container whose
// runtime collects it. A nil *Log records nothing, so that code that
// decides calls Record whether the trail is on or off.
package audit
