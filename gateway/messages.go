package gateway

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/mcpp/gateway/contexts"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/participant"
)

// systemMessage is an envelope the gateway writes. Protocol comes first so
// that its string token sits at a known offset (protocolSpan).
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
		Protocol: protocol, ID: uuid.NewString(), TS: time.Now().UTC().Format(envelope.TimeFormat),
		From: envelope.GatewayID, Kind: kind, Payload: payload,
	}
}

func (m *systemMessage) bytes() []byte {
	b, err := json.Marshal(m)
	if err != nil {
		panic("gateway: system message does not marshal: " + err.Error()) // a bug, never input
	}
	return b
}

// direct builds a system message addressed to one participant alone, in
// its protocol.
func direct(to, protocol, kind, correlationID string, payload any) []byte {
	m := newSystemMessage(protocol, kind, payload)
	m.To = []string{to}
	m.CorrelationID = correlationID
	return m.bytes()
}

type identity struct {
	ID           string                   `json:"id"`
	Capabilities participant.Capabilities `json:"capabilities"`
}

func identityOf(p *participant.Participant) identity {
	return identity{ID: p.ID, Capabilities: p.Capabilities}
}

// errorPayload is the payload of system/error (SPEC section 5).
func errorPayload(e *envelope.Error) map[string]any {
	pl := map[string]any{"error": e.Code, "message": e.Message, "retryable": e.Code.Retryable()}
	if e.RetryAfter > 0 {
		pl["retry_after_ms"] = max(1, (e.RetryAfter+time.Millisecond-1)/time.Millisecond)
	}
	for k, v := range e.Details {
		pl[k] = v
	}
	return pl
}

// contextRef is the context field of a system/context event.
type contextRef struct {
	ID     string `json:"id"`
	Type   string `json:"type,omitempty"`
	Parent string `json:"parent,omitempty"`
}

type contextStats struct {
	Messages     int64    `json:"messages"`
	Bytes        int64    `json:"bytes"`
	Participants []string `json:"participants"`
	Depth        int      `json:"depth"`
	Created      string   `json:"created"`
	LastActivity string   `json:"last_activity"`
	Concluded    string   `json:"concluded"`
}

// contextEvent is the system/context event of a concluded context, in
// MCPP, and its id.
func contextEvent(c *contexts.Concluded) ([]byte, string) {
	m := newSystemMessage(envelope.ProtocolMCPP, "system/context", map[string]any{
		"event":  "concluded",
		"reason": c.Reason,
		"stats": contextStats{
			Messages: c.Messages, Bytes: c.Bytes, Participants: c.Participants,
			Depth: c.Depth, Created: contexts.FormatTime(c.Created),
			LastActivity: contexts.FormatTime(c.LastActivity), Concluded: contexts.FormatTime(c.At),
		},
	})
	m.Context = contextRef{ID: c.ID, Type: c.Type, Parent: c.Parent}
	return m.bytes(), m.ID
}

// presence is a system/presence event, in MCPP, and its id.
func presence(event string, p *participant.Participant) ([]byte, string) {
	m := newSystemMessage(envelope.ProtocolMCPP, "system/presence", map[string]any{
		"event": event, "participant": identityOf(p),
	})
	return m.bytes(), m.ID
}

// asMCPX returns body with its protocol token replaced by MCPx's, in a new
// slice; the fan-out calls it at most once per envelope.
func asMCPX(body []byte, span envelope.Span) []byte {
	if !span.Valid() || span.End > len(body) {
		return body
	}
	out := make([]byte, 0, len(body)-(span.End-span.Start)+len(envelope.ProtocolMCPX)+2)
	out = append(out, body[:span.Start]...)
	out = append(out, '"')
	out = append(out, envelope.ProtocolMCPX...)
	out = append(out, '"')
	return append(out, body[span.End:]...)
}
