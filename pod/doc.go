// Package pod is the core of the MCPP gateway: a pod's members, its
// order, and the path of one envelope from the participant that sends it
// to the queues of those that receive it (docs/protocol.md).
//
// # The path of an envelope
//
//	reader goroutine of the sender (WebSocket; a POST and an MCP tool call take the same path: Sender, Handle)
//	  parse once (envelope.Parse) → from, kind, capability, size      refusal: system/error, by its reply route
//	  ── the pod's order lock ─────────────────────────────────────────────────────────────────────────────
//	  duplicate_id, the context registry (depth, conflicts, caps, rates)
//	  → frame = header + envelope bytes (envelope.AppendFrame)
//	  → the pod's log decides where the order comes from (log.go):
//	     one node      the order is the node's: record it in the history index, queue it for every
//	                   member whose filter admits it (the frame's body, shared by all), hand it to the
//	                   history writer (history.Writer), which stores it behind, in the same order
//	     several nodes the order is the history stream's: send it into the stream; it comes back to
//	     with history  every node, through the node's one ordered consumer of the stream (Follower),
//	                   and is recorded and queued then
//	     several nodes each node queues its own at once and the others' as the pod's core NATS
//	     no history    subject brings them
//	  ── the lock is let go: each member's writer is woken once for all it was queued (unlock), or at ─
//	     the end of the burst (Burst): a reader's while it has more messages read, a POST's body, the
//	     dispatcher's that brings the stream's frames (dispatch.go)
//	writer of each member (participant): everything queued in one system call
//
// So on one node an envelope is in its members' queues before its sender
// reads its next one, with nothing but the node's own memory on the way,
// and the history stream is written behind, in the same order, from one
// goroutine: replay, resume, folding and duplicate_id read the pod's
// index (history.Index), which has every accepted envelope at once, and
// the stream's bodies, waiting for the writer (Writer.Sync) for the ones
// it has not stored yet, so that a resume right after a burst is exact
// while the stream is still behind. Across several nodes the stream's
// order is the one every node delivers in, so a resume is exact on any
// node; each node follows the stream with one ordered consumer for all
// the pods it serves (tail.go: Follower, history.Stream.Follow), never
// one per pod, so pods are bounded by memory and --max-pods, not by
// JetStream's consumer limit. A node whose follower stops and cannot go
// on where it was has lost the pods' order: their connections there are
// closed with 4503, to resume (orderLost).
//
// # A sender, its replies, its burst
//
// Handle takes apart three things a message comes with. The Sender is the
// participant it comes from, as its way in sees it: its id, what it may
// send (its connection's capabilities, or Caps), its connection or MCP
// session (Conn, Guest: a kicked or replaced one is refused), its rate
// buckets. Its reply route (Sender.Reply, a Replier) is where the pod's
// answers go: envelopes in a connection's own queue (ReplyTo), or the
// Results that a POST and an MCP tool call answer with; ingress tells it
// of each message once, accepted, refused or answered. The Burst is whose
// writers wait for the end of what is being sent: a reader with more
// messages read, a POST's body and each dispatcher goroutine keep one
// across many holds of the order lock, of one pod or several, and end it
// with Flush; without one (nil) the writers are woken as the lock goes.
//
// # The pods of a node
//
// A Node owns its pods, as Centrifuge's Node owns its Hub (table.go): a
// table of the open pods by name, in shards of their own lock, so that
// joins in different pods do not wait on each other. Every way into a pod
// (a WebSocket upgrade, a POST, an MCP session, the operator's kick) is
// Node.Enter: find the pod or open it (Node.Pod, under Config.MaxPods),
// wait until it has read its past, and join it with what differs (Reserve,
// JoinGuest, Acquire), looking again when the pod was removed as it was
// looked up (the join says dead). A pod goes as soon as it is idle (no
// member, pending join, publisher, ban or context: Node.RemoveIdle, after
// a leave), or at the janitor's sweep (Node.Tick); one that lost its order
// or could not read its past is forgotten, so that the next Enter opens it
// anew.
//
// # What a pod holds
//
// Pod: its members (connections, and guests: MCP sessions with no
// connection), the members of other nodes (remote.go), its context
// registry (contexts.Registry), its history index, its log, and its flow
// control (flow.go: how far a sender may run ahead of the history and of
// the stream). An idle pod holds no goroutine: what other nodes send for
// it is handed to a few dispatcher goroutines shared by every pod
// (dispatch.go).
//
// # Locks
//
// Every decision about what comes next in a pod is made under its order
// lock (Pod.mu): an accepted envelope, a join or a leave, a context's
// conclusion (the registry's timer takes it first: Registry's OnDue), a
// frame from the log. The whole order of the locks, this package's, the
// history's, the gateway's and those taken under them, is in
// docs/locks.md; its spine:
//
//	tableShard.mu (the node's pod table), or Tail.serial → streamLog.serial
//	  → Pod.mu, the order lock
//	    → contexts.Registry.mu (committing a frame under it takes what follows)
//	    → liveBodies.mu → history.Writer.mu → history.Index.mu (or one alone)
//	    → capability.PodGrants.mu → capability.Grants.mu
//	    → leaves: history.Index.mu, flow.mu, participant.Queue.mu, the memory
//	      broker's, gateway.cluster.mu
//
// streamLog.mu is taken under streamLog.serial, never under Pod.mu.
// A participant's writer is woken after the order lock is let go, at the
// end of the burst it was queued in (Burst). A function that must be
// called with a lock held says so last in its doc comment: "Call it with
// Pod.mu held."
//
// # Limits
//
// Node.Config is the gateway's limits as its flags set them
// (limits.Config, embedded: Config.MaxMessageBytes, Config.Rate), read
// where each applies: ingress and the registry of each pod's contexts,
// which takes the Contexts part; calls.go and proposals.go the Calls
// part. Node.Limits (the welcome's) and Node.Buckets are derived from it
// (limits.Config.Welcome, NewBuckets).
package pod
