package pod

import (
	"encoding/json"

	"github.com/google/uuid"

	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/wire"
)

// Replier is a sender's reply route: where the pod's answers to what it
// sends go. A connection's are envelopes in its own queue (ReplyTo); a
// sender with no connection (a POST, an MCP tool call) collects them as
// the results its caller answers with (Results). Ingress tells it of
// every message it handles exactly once: accepted, refused, or answered.
type Replier interface {
	// Accepted says the envelope id was taken into the pod's order.
	// answer, when not nil, is the gateway's answer to it, of kind (a
	// capability change's).
	Accepted(id, kind string, answer any)
	// Refused answers system/error to the message whose id is id (""
	// when none could be read).
	Refused(id string, e wire.ErrorPayload)
	// Answered answers the gateway request id with an envelope of kind
	// and its payload.
	Answered(id, kind string, answer any)
}

// ReplyTo is the reply route of a connection: each answer is an envelope
// to it alone, correlated to the message it answers, in its send queue
// (participant.Answer). An accepted envelope is answered only when the
// gateway has something to say of it: its members' copies tell the rest.
func ReplyTo(c *participant.Participant) Replier { return connReplier{c} }

// connReplier is ReplyTo's: one pointer, held in the interface as it is.
type connReplier struct{ c *participant.Participant }

func (r connReplier) Accepted(id, kind string, answer any) {
	if answer != nil {
		r.Answered(id, kind, answer)
	}
}

func (r connReplier) Refused(id string, e wire.ErrorPayload) {
	r.Answered(id, wire.KindError, e)
}

func (r connReplier) Answered(id, kind string, answer any) {
	r.c.Answer(direct(r.c.ID, r.c.Protocol, kind, id, answer))
}

// Results is the reply route of a sender with no connection: one result a
// message handled, in order, which a POST answers with (wire.PublishAnswer)
// and an MCP tool call reads its own from.
type Results []wire.PublishResult

func (rs *Results) Accepted(id, _ string, answer any) {
	r := wire.PublishResult{ID: id}
	if answer != nil {
		r.Answer = mustMarshal(answer)
	}
	*rs = append(*rs, r)
}

func (rs *Results) Refused(id string, e wire.ErrorPayload) {
	*rs = append(*rs, wire.PublishResult{ID: id, Error: &e})
}

func (rs *Results) Answered(id, _ string, answer any) {
	if id == "" {
		id = uuid.NewString() // as for any envelope without one (docs/protocol.md section 2)
	}
	*rs = append(*rs, wire.PublishResult{ID: id, Answer: mustMarshal(answer)})
}

// mustMarshal is an answer's JSON.
func mustMarshal(answer any) json.RawMessage {
	b, err := json.Marshal(answer)
	if err != nil {
		panic("pod: an answer does not marshal: " + err.Error()) // a bug, never input
	}
	return b
}
