package pod

import (
	"bytes"
	"encoding/json"

	"github.com/mcpp/gateway/contexts"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/filter"
	"github.com/mcpp/gateway/history"
	"github.com/mcpp/gateway/wire"
)

// request answers an envelope of a gateway/* kind (docs/protocol.md
// section 6). rateErr is the sender's rate verdict (nil within its rate).
// The refusals follow the table of section 5: a payload that does not fit
// the request (invalid_envelope, an unknown before or after id of
// gateway/history included) comes before rate_limited, and
// unknown_request and invalid_filter after it.
func (in *ingress) request(rateErr *envelope.Error) {
	p := in.pod
	switch in.env.Kind {
	case wire.RequestFilter:
		if !isObject(in.env.Payload) {
			in.refuse(envelope.Errorf(wire.CodeInvalidEnvelope, "gateway/filter needs a filter object as payload"), in.env.ID)
			return
		}
		if rateErr != nil {
			in.refuse(rateErr, in.env.ID)
			return
		}
		in.filterRequest()
	case wire.RequestContexts:
		q, e := in.contextsQuery()
		if e == nil {
			e = rateErr
		}
		if e != nil {
			in.refuse(e, in.env.ID)
			return
		}
		list := p.Registry.Query(q)
		if list == nil {
			list = []wire.ContextInfo{}
		}
		if in.from.Conn != nil {
			// The registry counts this node's envelopes as they are
			// accepted, before the stream hands them out (OrderStream):
			// the answer waits for them, so that a client that adds the
			// envelopes it receives after the answer to the answer's
			// counts (the viewer) does not count one twice.
			p.Settle()
		}
		in.reply(wire.KindContexts, wire.ContextsAnswer{Contexts: list})
	case wire.RequestHistory:
		q, e := in.historyQuery()
		if e == nil {
			e = p.CheckBound(q)
		}
		if e == nil {
			e = rateErr
		}
		if e != nil {
			in.refuse(e, in.env.ID)
			return
		}
		answer, e := p.HistoryPage(q, in.from.filter(), in.from.ID, in.from.Protocol)
		if e != nil {
			in.refuse(e, in.env.ID)
			return
		}
		in.reply(wire.KindHistory, answer)
	default:
		if rateErr != nil {
			in.refuse(rateErr, in.env.ID)
			return
		}
		in.refuse(envelope.Errorf(wire.CodeUnknownRequest, "unknown request %q (known: gateway/filter, gateway/contexts, gateway/history)", in.env.Kind), in.env.ID)
	}
}

// historyRequest is the payload of gateway/history (wire.HistoryRequest,
// docs/protocol.md section 6) as the gateway reads it, strictly: its
// pointers tell a field given its zero value from an absent one, which
// wire's omitempty fields cannot ("limit": 0 is refused, no limit is the
// default; "before" and "after" are refused together even when empty).
type historyRequest struct {
	Before  *string `json:"before"`
	After   *string `json:"after"`
	Context *string `json:"context"`
	Limit   *int    `json:"limit"`
	Fold    *bool   `json:"fold"`
}

// Defaults and bounds of gateway/history.
const (
	DefaultHistoryLimit = 100
	MaxHistoryLimit     = 1000
)

// historyQuery reads the payload of gateway/history.
func (in *ingress) historyQuery() (history.PageQuery, *envelope.Error) {
	q := history.PageQuery{Limit: DefaultHistoryLimit, Fold: true, MaxBytes: 4 * in.pod.node.Config.MaxMessageBytes}
	if in.env.Payload == nil || bytes.Equal(in.env.Payload, []byte("null")) {
		return q, nil
	}
	var hq historyRequest
	d := json.NewDecoder(bytes.NewReader(in.env.Payload))
	d.DisallowUnknownFields()
	if !isObject(in.env.Payload) || d.Decode(&hq) != nil {
		return q, envelope.Errorf(wire.CodeInvalidEnvelope, `gateway/history takes {"before"?: ID, "after"?: ID, "context"?: ID, "limit"?: 1 to 1000, "fold"?: BOOL}`)
	}
	if hq.Before != nil && hq.After != nil {
		return q, envelope.Errorf(wire.CodeInvalidEnvelope, "gateway/history takes before or after, not both")
	}
	if hq.Limit != nil {
		if *hq.Limit < 1 || *hq.Limit > MaxHistoryLimit {
			return q, envelope.Errorf(wire.CodeInvalidEnvelope, "limit must be 1 to %d", MaxHistoryLimit)
		}
		q.Limit = *hq.Limit
	}
	if hq.Before != nil {
		q.Before = *hq.Before
	}
	if hq.After != nil {
		q.After = *hq.After
	}
	if hq.Context != nil {
		q.Context = *hq.Context
	}
	if hq.Fold != nil {
		q.Fold = *hq.Fold
	}
	return q, nil
}

func (in *ingress) filterRequest() {
	c := in.from.Conn
	if c == nil {
		// A publisher over HTTP has no connection to filter.
		in.refuse(envelope.Errorf(wire.CodeUnknownRequest, "gateway/filter needs a connection: it is not answered over HTTP"), in.env.ID)
		return
	}
	f, err := c.Filter().Update(in.env.Payload)
	if err != nil {
		in.refuse(envelope.Errorf(wire.CodeInvalidFilter, "%s", err.(*filter.Error).Message), in.env.ID)
		return
	}
	c.SetFilter(f)
	in.reply(wire.KindFilter, f.Wire())
}

// contextsQuery is the payload of gateway/contexts (wire.ContextsRequest)
// as the gateway reads it, strictly, for the reason historyRequest says.
type contextsQuery struct {
	State *string `json:"state"`
	ID    *string `json:"id"`
	Type  *string `json:"type"`
	Limit *int    `json:"limit"`
}

const DefaultContextsLimit = 1000

// contextsQuery reads the payload of gateway/contexts.
func (in *ingress) contextsQuery() (contexts.Query, *envelope.Error) {
	q := contexts.Query{State: wire.StateActive, Limit: DefaultContextsLimit}
	if in.env.Payload == nil || bytes.Equal(in.env.Payload, []byte("null")) {
		return q, nil
	}
	var cq contextsQuery
	d := json.NewDecoder(bytes.NewReader(in.env.Payload))
	d.DisallowUnknownFields()
	if !isObject(in.env.Payload) || d.Decode(&cq) != nil {
		return q, envelope.Errorf(wire.CodeInvalidEnvelope, `gateway/contexts takes {"state"?: "active"|"concluded"|"all", "id"?, "type"?, "limit"?}`)
	}
	if cq.State != nil {
		switch *cq.State {
		case wire.StateActive, wire.StateConcluded, wire.StateAll:
			q.State = *cq.State
		default:
			return q, envelope.Errorf(wire.CodeInvalidEnvelope, `state must be "active", "concluded" or "all"`)
		}
	}
	if cq.Limit != nil {
		if *cq.Limit < 1 {
			return q, envelope.Errorf(wire.CodeInvalidEnvelope, "limit must be at least 1")
		}
		// Active and retained contexts are each bounded by the pod cap.
		q.Limit = min(*cq.Limit, 2*in.pod.node.Config.MaxContextsPerPod)
	}
	if cq.ID != nil {
		q.ID = *cq.ID
	}
	if cq.Type != nil {
		q.Type = *cq.Type
	}
	return q, nil
}

func isObject(raw []byte) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == '{'
}
