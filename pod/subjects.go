package pod

import "strings"

// The NATS subjects of a pod (docs/protocol.md section 7). The history
// stream captures every pod's subjects (StreamSubjects); live frames'
// bodies travel outside it, and a node asks their origin for one it
// missed on the origin's bodies subject.
const (
	subjectPrefix = "mcpp.pod."
	livePrefix    = "mcpp.live."
	bodiesPrefix  = "mcpp.nodes.bodies."
	// StreamSubjects are the subjects the history stream captures.
	StreamSubjects = "mcpp.pod.>"
)

// Subject is the NATS subject of a pod: its envelopes and context events,
// in the history stream, or on core NATS without history. Pod names may
// hold dots, which separate NATS tokens, so they become "~", which pod
// names cannot hold.
func Subject(pod string) string { return subjectPrefix + token(pod) }

// markerSubject holds, in the history stream, the places of a pod's live
// frames (presence, ephemeral envelopes): its own subject, so that their
// markers count against --history apart from the pod's entries.
func markerSubject(pod string) string { return subjectPrefix + token(pod) + ".live" }

// liveSubject carries the bodies of a pod's live frames between nodes,
// outside the stream: history never holds them.
func liveSubject(pod string) string { return livePrefix + token(pod) }

// bodiesSubject is where node answers the other nodes that ask for the
// body of one of its live frames they did not receive (livebodies.go).
func bodiesSubject(node string) string { return bodiesPrefix + node }

func token(pod string) string { return strings.ReplaceAll(pod, ".", "~") }
