// Package envelope parses and checks one MCPP envelope, the JSON object that
// participants of a pod exchange (docs/protocol.md section 2), and its
// optional sub-context (section 3).
//
// The gateway parses an envelope exactly once, at ingress. Parse records the
// few fields the gateway acts on (kind, from, to, id, the raw context) as
// strings and byte spans of the original message and never re-encodes it:
// what a participant wrote is what the others receive, apart from the fields
// the gateway fills when they are absent (Fill), which are spliced in front of
// the sender's own bytes.
//
// What travels between the gateway's ingress and its fan-out (through the
// pod's JetStream stream, or NATS subjects without history, and between
// the nodes of a cluster) is a Frame: a short binary header with
// the decisions made at ingress (sender, recipients, the context's registered
// type and ancestry, whether the kind concludes a context) followed by the
// envelope bytes. A recipient's filter decides on the header alone, so no
// envelope is parsed twice, and the bytes after the header are shared by every
// recipient.
package envelope
