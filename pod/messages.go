package pod

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/mcpp/gateway/contexts"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/wire"
)

// systemMessage is an envelope the gateway writes, its payload one of
// wire's. Protocol comes first so that its string token sits at a known
// offset (protocolSpan). It is not a wire.Envelope, whose payload is raw
// JSON: the payload is marshalled once, with the rest.
type systemMessage struct {
	Protocol      string   `json:"protocol"`
	ID            string   `json:"id"`
	TS            string   `json:"ts"`
	From          string   `json:"from"`
	To            []string `json:"to,omitempty"`
	Kind          string   `json:"kind"`
	CorrelationID string   `json:"correlation_id,omitempty"`
	Context       any      `json:"context,omitempty"`
	Payload       any      `json:"payload"`
}

// protocolSpan is where the protocol string token of a marshalled
// systemMessage is: right after `{"protocol":`.
var protocolSpan = envelope.Span{Start: len(`{"protocol":`), End: len(`{"protocol":"mcpp/v0.1"`)}

func newSystemMessage(protocol, kind string, payload any) *systemMessage {
	return &systemMessage{
		Protocol: protocol, ID: uuid.NewString(), TS: time.Now().UTC().Format(wire.TimeFormat),
		From: wire.GatewayID, Kind: kind, Payload: payload,
	}
}

func (m *systemMessage) bytes() []byte {
	b, err := json.Marshal(m)
	if err != nil {
		panic("pod: system message does not marshal: " + err.Error()) // a bug, never input
	}
	return b
}

// Direct builds a system message addressed to one participant alone, in
// its protocol.
func Direct(to, protocol, kind, correlationID string, payload any) []byte {
	m := newSystemMessage(protocol, kind, payload)
	m.To = []string{to}
	m.CorrelationID = correlationID
	return m.bytes()
}

var direct = Direct

// contextEvent is the system/context event of a concluded context, in
// MCPP, and its id (docs/protocol.md section 3).
func contextEvent(c *contexts.Concluded) ([]byte, string) {
	m := newSystemMessage(wire.ProtocolMCPP, wire.KindContext, wire.ContextEvent{
		Event:  wire.ContextConcluded,
		Reason: c.Reason,
		Stats:  ContextStats(c),
	})
	m.Context = wire.Context{ID: c.ID, Type: c.Type, Parent: c.Parent}
	return m.bytes(), m.ID
}

// ContextStats are the statistics of a concluded context, as its
// system/context event and MCP's context_return report them.
func ContextStats(c *contexts.Concluded) wire.ContextStats {
	return wire.ContextStats{
		Messages: c.Messages, Bytes: c.Bytes, Participants: c.Participants,
		Depth: c.Depth, Created: contexts.FormatTime(c.Created),
		LastActivity: contexts.FormatTime(c.LastActivity), Concluded: contexts.FormatTime(c.At),
		Tokens: c.Tokens, TokensFolded: c.TokensFolded, TokensSaved: c.TokensSaved,
	}
}

// presenceMessage is a system/presence event about who, in MCPP, and its
// id (docs/protocol.md section 5).
func presenceMessage(event string, who wire.Identity, reason string) ([]byte, string) {
	m := newSystemMessage(wire.ProtocolMCPP, wire.KindPresence, wire.Presence{Event: event, Participant: who, Reason: reason})
	return m.bytes(), m.ID
}

// welcome is the first message of a participant (docs/protocol.md
// section 5), with what follows of the pod's past when it asked (section
// 8).
func (p *Pod) welcome(r *participant.Participant, others []wire.Identity, hist *wire.HistoryInfo) []byte {
	return direct(r.ID, r.Protocol, wire.KindWelcome, "", wire.Welcome{
		You:          identityOf(r),
		Participants: others,
		Pod:          p.Name,
		Filter:       r.Filter().Wire(),
		Limits:       p.node.Limits,
		History:      hist,
	})
}
