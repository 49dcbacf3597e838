package client

import (
	"github.com/mcpp/gateway/wire"
)

// Event is what Next returns and Events delivers: one of *Message,
// *Welcome, *Presence, *GatewayError, *ContextEvent and *Reconnected. Use
// a type switch:
//
//	switch ev := ev.(type) {
//	case *client.Message:      // an envelope of the pod
//	case *client.Presence:     // someone joined or left
//	case *client.GatewayError: // an envelope you sent was refused
//	case *client.ContextEvent: // a context concluded
//	case *client.Welcome:      // the first event
//	case *client.Reconnected:  // the connection was restored
//	}
type Event interface{ event() }

// Message is an envelope of the pod: one a participant sent (yours too,
// when you joined with echo), live or replayed from history, or any
// other envelope the client has no type for. Its fields are the
// envelope's (m.Kind, m.From, m.Payload…).
type Message struct {
	*wire.Envelope
	// Raw is the envelope as the gateway sent it (one line of a batch).
	Raw []byte
}

// Welcome is the first event of a client: the gateway's system/welcome
// (who you are, who else is there, your filter, the gateway's limits,
// and, when you asked for history, what replay follows).
type Welcome struct {
	Envelope *wire.Envelope
	wire.Welcome
	// Raw is the envelope as the gateway sent it (one line of a batch),
	// for a tool that passes the gateway's bytes on.
	Raw []byte
}

// Presence says that another participant joined or left the pod
// (system/presence).
type Presence struct {
	Envelope *wire.Envelope
	wire.Presence
	// Raw is the envelope as the gateway sent it (one line of a batch).
	Raw []byte
}

// ContextEvent says that a context concluded (system/context): Context is
// the context, Reason why, Stats what went on in it. It follows the
// envelope that concluded the context, when that one concluded it.
type ContextEvent struct {
	Envelope *wire.Envelope
	Context  wire.Context
	wire.ContextEvent
	// Raw is the envelope as the gateway sent it (one line of a batch).
	Raw []byte
}

// Reconnected says that the connection was lost and is back. Resumed
// true means that nothing was lost: the envelopes sent meanwhile follow,
// none missing and none twice. Resumed false means that some may be
// missing (a gap): the gateway no longer had the last envelope you
// received, or had no history to resume from, or you had received none
// that history keeps. Welcome is the new connection's welcome, which
// replaces a Welcome event: presence events missed while away are
// not replayed, so its Participants are the ones to trust.
type Reconnected struct {
	Envelope *wire.Envelope // the new welcome
	Welcome  wire.Welcome
	// Raw is the new welcome as the gateway sent it.
	Raw []byte
	// Resumed says whether the gateway resumed after ResumedAfter.
	Resumed bool
	// ResumedAfter is the id of the envelope the client asked to resume
	// after (the last one it handed you that history keeps), or "".
	ResumedAfter string
	// Cause is why the connection was lost.
	Cause error
	// Attempts is how many dials it took.
	Attempts int
}

// Gap reports whether envelopes may have been missed while the
// connection was down.
func (r *Reconnected) Gap() bool { return !r.Resumed }

func (*Message) event()      {}
func (*Welcome) event()      {}
func (*Presence) event()     {}
func (*ContextEvent) event() {}
func (*Reconnected) event()  {}
func (*GatewayError) event() {}
