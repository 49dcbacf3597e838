// Package history keeps a pod's history (docs/protocol.md section 8): the
// stored envelopes and context events that a late joiner replays, that a
// client resumes after, that gateway/history pages through and that MCP
// reads. It has two halves.
//
// The stream holds the bodies. Backend is what the gateway needs of it;
// Stream is the JetStream implementation (one stream for every pod, a
// subject per pod, bounded per subject by --history entries and by age
// and bytes), Memory the in-process one the pod's unit tests use. A
// Writer stores each pod's frames behind the fan-out, in the order it is
// given them, packed into batches (batch.go) so that a burst costs few
// stream messages; on a node's own stream it sends them in rounds, each
// acknowledged once, and lets a pod's batch take its frames of a second
// (round.go); Sync waits until everything appended is stored. Read
// and Scan read messages back by sequence (direct gets, no consumer);
// Follow is a node's one ordered consumer of the whole stream, which a
// cluster's nodes deliver in the order of. What Follow brings and Read
// and Scan read is kept in the node's Cache (cache.go), bounded in bytes
// (--history-cache), where Read takes it from the next time.
//
// The Index holds a pod's order in memory, one small Entry per stored
// frame, holding no pointer (the collector never scans a pod's entries):
// its header (ids, kind, context, recipients) in the index's arena of
// byte segments (arena.go), its size and token estimate, where the stream
// holds it (Loc), and until then the frame itself (the index's pending
// list), so that a reader never waits for the stream; ids are found by a
// hash and their bytes compared (ids.go). Every selection is
// made on the index under its lock, and only the selected bodies are
// read: Newest (history=N), NewestWithin (history=tokens:N), After
// (resume=), Since (MCP's pod_read) and Page (gateway/history). Folding
// (a concluded context shows only its conclusions and its event) and
// collapsing (a consumed transient envelope shows only its summary,
// collapse.go) are decided there, from the headers.
//
// Token estimates (tokens.go, envelope.EstimateTokens) are worked out
// once per envelope, before the pod's order lock, and summed by the
// selections; a collapsed entry is estimated as it is sent.
package history
