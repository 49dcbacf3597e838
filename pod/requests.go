package pod

import (
	"bytes"
	"context"
	"time"

	"github.com/mcpp/gateway/audit"
	"github.com/mcpp/gateway/contexts"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/filter"
	"github.com/mcpp/gateway/history"
	"github.com/mcpp/gateway/wire"
)

// request answers an envelope of a gateway/* kind (docs/protocol.md
// section 6). rateErr is the sender's rate verdict (nil within its rate).
// Each kind is read, then answered (requestKinds); the refusals follow
// the table of section 5: a payload that does not fit the request
// (invalid_envelope, an unknown before or after id of gateway/history
// included) comes before rate_limited, and what answering refuses
// (capability_violation of a kick, unknown_request, invalid_filter)
// after it.
func (in *ingress) request(rateErr *envelope.Error) {
	rk, ok := requestKinds[in.env.Kind]
	if !ok {
		e := rateErr
		if e == nil {
			e = envelope.Errorf(wire.CodeUnknownRequest, "unknown request %q (known: gateway/filter, gateway/contexts, gateway/history, gateway/refresh, gateway/kick, gateway/approve, gateway/proposals)", in.env.Kind)
		}
		in.refuse(e, in.env.ID)
		return
	}
	kind, answer, e := rk(in, rateErr)
	if e != nil {
		in.refuse(e, in.env.ID)
		return
	}
	in.reply(kind, answer)
}

// requestKind reads one request and, within the sender's rate (rateErr
// nil), answers it: the answer's kind and payload, or a refusal.
type requestKind func(in *ingress, rateErr *envelope.Error) (string, any, *envelope.Error)

// request makes a requestKind of its two steps: read checks the payload
// (its refusals come before rate_limited), answer answers what read
// returned.
func request[R any](read func(*ingress) (R, *envelope.Error), answer func(*ingress, R) (string, any, *envelope.Error)) requestKind {
	return func(in *ingress, rateErr *envelope.Error) (string, any, *envelope.Error) {
		r, e := read(in)
		if e == nil {
			e = rateErr
		}
		if e != nil {
			return "", nil, e
		}
		return answer(in, r)
	}
}

// requestKinds are the requests the gateway answers, by kind.
var requestKinds = map[string]requestKind{
	wire.RequestFilter:    request((*ingress).readFilter, (*ingress).filterRequest),
	wire.RequestContexts:  request((*ingress).contextsQuery, (*ingress).contextsAnswer),
	wire.RequestHistory:   request((*ingress).boundHistoryQuery, (*ingress).historyAnswer),
	wire.RequestRefresh:   request(readStrict[wire.Refresh]("gateway/refresh", `{"token": TOKEN}`, func(r wire.Refresh) bool { return r.Token != "" }), (*ingress).refresh),
	wire.RequestKick:      request((*ingress).readKick, (*ingress).kickAnswer),
	wire.RequestApprove:   request(readStrict[wire.Approve]("gateway/approve", `{"proposal": ID, "digest": "sha256:HEX" (the call's, as its pending event and gateway/proposals give it), "scope"?: "once" | "always", "context"?: ID, "payload"?: PATTERN}`, func(a wire.Approve) bool { return a.Proposal != "" && a.Digest != "" }), (*ingress).approveAnswer),
	wire.RequestProposals: request(func(in *ingress) (bool, *envelope.Error) { return proposalsRequest(in.env.Payload) }, (*ingress).proposalsAnswer),
}

// readStrict reads a request's payload into R strictly (strictDecode),
// refusing one that does not decode, or that ok refuses, with what the
// request takes.
func readStrict[R any](kind, takes string, ok func(R) bool) func(*ingress) (R, *envelope.Error) {
	return func(in *ingress) (R, *envelope.Error) {
		var r R
		if err := strictDecode(in.env.Payload, &r); err != nil || !ok(r) {
			return r, envelope.Errorf(wire.CodeInvalidEnvelope, "%s takes %s", kind, takes)
		}
		return r, nil
	}
}

func (in *ingress) readFilter() (struct{}, *envelope.Error) {
	if !isObject(in.env.Payload) {
		return struct{}{}, envelope.Errorf(wire.CodeInvalidEnvelope, "gateway/filter needs a filter object as payload")
	}
	return struct{}{}, nil
}

func (in *ingress) contextsAnswer(q contexts.Query) (string, any, *envelope.Error) {
	p := in.pod
	list := p.Registry.Query(q)
	if list == nil {
		list = []wire.ContextInfo{}
	}
	if in.from.Conn != nil {
		// The registry counts this node's envelopes as they are
		// accepted, before the stream hands them out (OrderStream): the
		// answer waits for them, so that a client that adds the
		// envelopes it receives after the answer to the answer's counts
		// (the viewer) does not count one twice.
		p.Settle()
	}
	return wire.KindContexts, wire.ContextsAnswer{Contexts: list}, nil
}

// boundHistoryQuery reads gateway/history's payload and checks its bound
// (an unknown before or after id), both before the rate.
func (in *ingress) boundHistoryQuery() (history.PageQuery, *envelope.Error) {
	q, e := in.historyQuery()
	if e == nil {
		e = in.pod.CheckBound(q)
	}
	return q, e
}

func (in *ingress) historyAnswer(q history.PageQuery) (string, any, *envelope.Error) {
	answer, e := in.pod.HistoryPage(q, in.from.filter(), in.from.ID, in.from.Protocol)
	if e != nil {
		return "", nil, e
	}
	return wire.KindHistory, answer, nil
}

func (in *ingress) readKick() (wire.Kick, *envelope.Error) {
	var k wire.Kick
	switch err := strictDecode(in.env.Payload, &k); {
	case err != nil || !envelope.ValidParticipantID(k.Participant):
		return k, envelope.Errorf(wire.CodeInvalidEnvelope, `gateway/kick takes {"participant": ID, "reason"?: TEXT, "ban_ms"?: 0 to %d}`, maxBanMS)
	case k.BanMS < 0 || k.BanMS > maxBanMS:
		return k, envelope.Errorf(wire.CodeInvalidEnvelope, "ban_ms must be 0 to %d (a week)", maxBanMS)
	case len(k.Reason) > maxReasonBytes:
		return k, envelope.Errorf(wire.CodeInvalidEnvelope, "reason is over %d bytes", maxReasonBytes)
	}
	return k, nil
}

func (in *ingress) kickAnswer(k wire.Kick) (string, any, *envelope.Error) {
	if !in.allowed() { // its capabilities, or a pod-wide grant
		e := envelope.Errorf(wire.CodeCapabilityViolation, "gateway/kick needs the gateway/kick capability for the whole pod (a grant scoped to a context never allows it)")
		e.AttemptedKind, e.YourCapabilities, e.Rule = wire.RequestKick, in.from.caps().Wire(), in.capabilityRule(wire.RequestKick)
		return "", nil, e
	}
	answer, e := in.kick(k)
	if e != nil {
		return "", nil, e
	}
	return wire.KindKick, answer, nil
}

func (in *ingress) approveAnswer(a wire.Approve) (string, any, *envelope.Error) {
	answer, e := in.approve(a)
	if e != nil {
		return "", nil, e
	}
	return wire.KindApprove, answer, nil
}

func (in *ingress) proposalsAnswer(all bool) (string, any, *envelope.Error) {
	return wire.KindProposals, wire.ProposalsAnswer{Proposals: in.pod.ProposalsList(all)}, nil
}

// Bounds of gateway/kick: a ban of at most a week (a longer one is the
// token file's or the identity provider's to decide), a reason short
// enough for a close frame's 123 bytes with who kicked.
const (
	maxBanMS       = 7 * 24 * 3600 * 1000
	maxReasonBytes = 80
)

// strictDecode reads a request's payload (an object) into v, refusing
// fields v does not have, and keys that name one only ignoring case
// (envelope.DecodePayload).
func strictDecode(payload []byte, v any) error {
	return envelope.DecodePayload(payload, v, true)
}

// refresh handles gateway/refresh: a fresh token for the connection,
// which must name the same participant and may join the pod; its claims
// (capabilities, expiry) apply from the next envelope on.
func (in *ingress) refresh(r wire.Refresh) (string, any, *envelope.Error) {
	p, c := in.pod, in.from.Conn
	switch {
	case c == nil:
		return "", nil, envelope.Errorf(wire.CodeUnknownRequest, "gateway/refresh needs a connection: over HTTP and MCP every request carries its token")
	case p.node.Verify == nil:
		return "", nil, envelope.Errorf(wire.CodeUnknownRequest, "gateway/refresh needs tokens: this gateway runs open")
	}
	ctx, cancel := context.WithTimeout(context.Background(), refreshTimeout)
	defer cancel()
	a, e := p.node.Verify(ctx, r.Token, p.Name)
	if e != nil {
		return "", nil, e
	}
	if a.ID != c.ID {
		return "", nil, envelope.Errorf(wire.CodeAuthViolation, "the token names participant %q, not you (%q): a connection keeps its participant", a.ID, c.ID).Ruled(audit.RuleRefreshIdentity)
	}
	c.Refresh(a.Caps, a.Credential)
	p.audit(audit.Record{Decision: audit.Refresh, Participant: a.ID, Transport: in.from.transport(), Credential: a.Token,
		Capabilities: a.Caps.Wire(), EnvelopeID: in.env.ID})
	answer := wire.Refreshed{Participant: a.ID, Capabilities: a.Caps.Wire()}
	if exp := a.Credential.Expires; !exp.IsZero() {
		s := exp.UTC().Format(wire.TimeFormat)
		answer.Expires = &s
	}
	return wire.KindRefresh, answer, nil
}

// refreshTimeout bounds a refresh's verification (a JWKS fetch for a new
// key).
const refreshTimeout = 10 * time.Second

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
	// MaxTokens bounds the page by token estimate (section 8).
	MaxTokens *int `json:"max_tokens"`
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
	if strictDecode(in.env.Payload, &hq) != nil {
		return q, envelope.Errorf(wire.CodeInvalidEnvelope, `gateway/history takes {"before"?: ID, "after"?: ID, "context"?: ID, "limit"?: 1 to 1000, "fold"?: BOOL, "max_tokens"?: 1 or more}`)
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
	if hq.MaxTokens != nil {
		if *hq.MaxTokens < 1 {
			return q, envelope.Errorf(wire.CodeInvalidEnvelope, "max_tokens must be 1 or more")
		}
		q.MaxTokens = *hq.MaxTokens
	}
	return q, nil
}

func (in *ingress) filterRequest(struct{}) (string, any, *envelope.Error) {
	c := in.from.Conn
	if c == nil {
		// A publisher over HTTP has no connection to filter.
		return "", nil, envelope.Errorf(wire.CodeUnknownRequest, "gateway/filter needs a connection: it is not answered over HTTP")
	}
	f, err := c.Filter().Update(in.env.Payload)
	if err != nil {
		return "", nil, envelope.Errorf(wire.CodeInvalidFilter, "%s", err.(*filter.Error).Message)
	}
	c.SetFilter(f)
	return wire.KindFilter, f.Wire(), nil
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
	if strictDecode(in.env.Payload, &cq) != nil {
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
