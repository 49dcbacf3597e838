package envelope

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/mcpp/gateway/wire"
)

// Fill returns the envelope as it is relayed: the sender's bytes with
// protocol, id, ts and from spliced in after the opening brace when they were
// absent (and trace, when SetTrace gave one or a malformed one's valid
// traceparent is kept), what was wrong in its trace cut out (trace.go),
// and the span of the protocol string token in the result. When nothing
// changes it returns Raw itself, without copying. It also sets e.ID when
// the gateway generated it.
func (e *Envelope) Fill(sender string, now time.Time) ([]byte, Span) {
	needProtocol, needID, needTS, needFrom := e.Protocol == "", e.ID == "", !e.HasTS, !e.HasFrom
	if !needProtocol && !needID && !needTS && !needFrom && !e.traceFill && !e.cutsTrace() {
		return e.Raw, e.ProtocolSpan
	}
	open := firstNonSpace(e.Raw) // Parse made sure it is '{'
	out := make([]byte, 0, len(e.Raw)+160+len(sender)+len(e.TraceParent)+len(e.TraceState))
	out = append(out, e.Raw[:open+1]...)
	var proto Span
	if needProtocol {
		out = append(out, `"protocol":`...)
		proto = Span{len(out), len(out) + len(wire.ProtocolMCPP) + 2}
		out = append(out, '"')
		out = append(out, wire.ProtocolMCPP...)
		out = append(out, `",`...)
	}
	if needID {
		e.ID = uuid.NewString()
		out = append(out, `"id":"`...)
		out = append(out, e.ID...)
		out = append(out, `",`...)
	}
	if needTS {
		out = append(out, `"ts":"`...)
		out = appendTS(out, now)
		out = append(out, `",`...)
	}
	if needFrom {
		out = append(out, `"from":"`...)
		out = append(out, sender...) // participant ids need no escaping
		out = append(out, `",`...)
	}
	if e.traceFill {
		out = appendTrace(out, e.TraceParent, e.TraceState)
	}
	shift := len(out) - (open + 1)
	// The sender's bytes follow, less the trace members cut out (which
	// may overlap: two trace members in a row share a comma).
	at, cutBefore := open+1, 0
	var cuts []Span
	if e.cutsTrace() {
		cuts = mergeSpans(e.traceCut)
	}
	for _, c := range cuts {
		if c.Start > at {
			out = append(out, e.Raw[at:c.Start]...)
		}
		if c.End <= e.ProtocolSpan.Start {
			cutBefore += c.End - max(c.Start, at)
		}
		at = max(at, c.End)
	}
	out = append(out, e.Raw[at:]...)
	if !needProtocol {
		proto = Span{e.ProtocolSpan.Start + shift - cutBefore, e.ProtocolSpan.End + shift - cutBefore}
	}
	return out, proto
}

// mergeSpans sorts spans in place by their start and joins those that
// overlap (a handful at most: the trace members of one envelope).
func mergeSpans(spans []Span) []Span {
	if len(spans) < 2 {
		return spans
	}
	slices.SortFunc(spans, func(a, b Span) int { return a.Start - b.Start })
	out := spans[:1]
	for _, s := range spans[1:] {
		if last := &out[len(out)-1]; s.Start <= last.End {
			last.End = max(last.End, s.End)
			continue
		}
		out = append(out, s)
	}
	return out
}

// stamp is the last time a ts was written for, to the millisecond, and
// its text: a busy gateway fills thousands of envelopes within one
// millisecond, and formatting the time is a good part of the cost of
// filling one.
type stamp struct {
	ms   int64
	text []byte
}

var lastStamp atomic.Pointer[stamp]

// appendTS appends now as ts is written (wire.TimeFormat: UTC, milliseconds).
func appendTS(dst []byte, now time.Time) []byte {
	ms := now.UnixMilli()
	if s := lastStamp.Load(); s != nil && s.ms == ms {
		return append(dst, s.text...)
	}
	s := &stamp{ms: ms, text: time.UnixMilli(ms).UTC().AppendFormat(make([]byte, 0, len(wire.TimeFormat)), wire.TimeFormat)}
	lastStamp.Store(s)
	return append(dst, s.text...)
}

// AddTo addresses an envelope that names no recipient to id: it splices
// "to":[id] into Raw after the opening brace (the gateway's answer to a
// call, whose to it fills when the sender left it out) and sets To. Call
// it before Fill. id must be a valid participant id (it needs no
// escaping).
func (e *Envelope) AddTo(id string) {
	open := firstNonSpace(e.Raw)
	ins := `"to":["` + id + `"],`
	out := make([]byte, 0, len(e.Raw)+len(ins))
	out = append(out, e.Raw[:open+1]...)
	out = append(out, ins...)
	out = append(out, e.Raw[open+1:]...)
	if e.Protocol != "" {
		e.ProtocolSpan.Start += len(ins)
		e.ProtocolSpan.End += len(ins)
	}
	for i := range e.traceCut {
		e.traceCut[i].Start += len(ins)
		e.traceCut[i].End += len(ins)
	}
	e.Raw = out
	e.To = append(e.To[:0], id)
}
