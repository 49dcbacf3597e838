package bridge

import (
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpp/gateway/wire"
)

// notified takes a notification of the server to the pod, as an
// mcp/notification envelope whose payload is the notification as it
// came (its params untouched):
//
//   - notifications/progress about a requester's call goes to that
//     requester alone, correlated to its request and in its context, with
//     the requester's own progress token back in it: progress is part of
//     a call's answer, and belongs where the answer goes.
//   - notifications/cancelled is about the server's requests of the
//     bridge, which the bridge answers at once, and
//     notifications/subscriptions/acknowledged about the bridge's own
//     subscriptions/listen (MCP 2026-07-28): neither is passed on.
//   - notifications/elicitation/complete about a URL-mode question goes
//     to the requester who was asked it (questions.go).
//   - every other notification (tools/list_changed, resources/updated,
//     log messages, progress without a call) goes to the whole pod: it is
//     about the server, and everyone who may call it wants to know.
func (b *Bridge) notified(s *session, m *jsonrpc.Request) {
	switch m.Method {
	case "notifications/cancelled", "notifications/subscriptions/acknowledged":
		return // about the bridge's own requests (its subscriptions/listen)
	case "notifications/elicitation/complete":
		// A URL-mode question was answered at its URL: its requester,
		// who opened it, is told, as part of its call.
		var p struct {
			ElicitationID string `json:"elicitationId"`
		}
		_ = json.Unmarshal(m.Params, &p)
		if c := b.elicitationCaller(p.ElicitationID); c != nil {
			b.out.send(&wire.Envelope{
				Kind: wire.KindMCPNotification, To: []string{c.requester},
				CorrelationID: wire.CorrelationID{c.envID}, Context: c.context,
				Payload: encodeNotification(m.Method, m.Params),
			})
			return
		}
	case "notifications/progress":
		if c, ok := b.progressCall(m); ok {
			if c == nil {
				return // a call that has left: its requester has its answer
			}
			b.out.send(&wire.Envelope{
				Kind: wire.KindMCPNotification, To: []string{c.requester},
				CorrelationID: wire.CorrelationID{c.envID}, Context: c.context,
				Payload: encodeNotification(m.Method, withMember(m.Params, "progressToken", c.token)),
			})
			return
		}
	}
	b.out.send(&wire.Envelope{Kind: wire.KindMCPNotification, Payload: encodeNotification(m.Method, m.Params)})
}

// progressCall finds the call a progress notification is about: ok when
// its token is one the bridge gave (a call's number), c nil when that call
// is no longer in flight.
func (b *Bridge) progressCall(m *jsonrpc.Request) (c *call, ok bool) {
	n, ok := tokenNumber(member(m.Params, "progressToken"))
	if !ok || n <= 0 || n > b.numbers.Load() {
		return nil, false
	}
	c = b.calls.byProgress(n)
	if c != nil && c.token == nil {
		return nil, false // that call asked for no progress: the token is the server's own
	}
	return c, true
}

// encodeNotification is a JSON-RPC notification, params as they are.
func encodeNotification(method string, params []byte) []byte {
	b, err := jsonrpc.EncodeMessage(&jsonrpc.Request{Method: method, Params: params})
	if err != nil {
		// A method name and params that came as JSON encode again.
		panic("bridge: encoding a notification: " + err.Error())
	}
	return b
}
