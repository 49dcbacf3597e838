// Package gateway is the MCPP pod gateway: an HTTP server that upgrades
// participants to WebSocket (github.com/coder/websocket), admits them to a
// pod, checks every envelope they send, and relays the accepted ones to the
// rest of the pod through NATS.
//
// The path of one envelope:
//
//	reader goroutine (one per connection)
//	  parse once (envelope.Parse) → from, kind, capability, size
//	  → context registry and rate limits (limits)        refusal: system/error
//	  → frame = header + envelope bytes → NATS publish on the pod's subject
//	pod subscription (one per pod per gateway process)
//	  decode the frame header once → for each member: Filter.Admits
//	  → participant.Deliver (shared bytes, bounded queue)  → writer goroutine
//
// A pod's subject is "mcpp.pod.<pod>" (dots in the pod name become "~").
// Envelopes, presence and context events share it, so a pod's history is one
// ordered stream that a JetStream stream can later keep and replay.
//
// By default the NATS server runs inside the process and opens no port.
package gateway
