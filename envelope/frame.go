package envelope

import (
	"encoding/binary"
	"errors"
)

// FrameKind says what a frame carries.
type FrameKind uint8

// The kinds of frames on a pod's subject.
const (
	FrameEnvelope     FrameKind = 1 // an accepted envelope
	FrameJoin         FrameKind = 2 // system/presence join; From is who joined
	FrameLeave        FrameKind = 3 // system/presence leave; From is who left
	FrameContextEvent FrameKind = 4 // system/context
	// FrameKick removes a participant from the pod (gateway/kick): every
	// node closes its connections there and keeps it out until the ban's
	// end. From is who is kicked; the body is the kick (a live frame:
	// history keeps nothing of it).
	FrameKick FrameKind = 5
)

// Frame flags.
const (
	// FlagConclusion marks an envelope whose kind is a conclusion kind, and
	// every system/context event: docs/protocol.md section 4 admits the event
	// exactly when it would admit a conclusion-kind envelope in that context.
	FlagConclusion uint8 = 1 << 0
	// FlagPath marks a context named by the ADR-p4m path form.
	FlagPath uint8 = 1 << 1
	// FlagReplace marks a join that replaces a connection of the same
	// participant on another node: that node closes its connection with
	// 4000, and nobody is told of a presence change.
	FlagReplace uint8 = 1 << 2
	// FlagTransient marks an envelope whose lifecycle mode is transient:
	// history replays it collapsed once another envelope consumed it.
	FlagTransient uint8 = 1 << 3
	// FlagLive marks a frame that history must not keep (presence, and
	// envelopes whose lifecycle mode is ephemeral). With history on, its
	// body travels outside the pod's stream and the stream holds only a
	// marker (FlagMarker) that gives it its place in the pod's order.
	FlagLive uint8 = 1 << 4
	// FlagMarker marks the stream's stand-in for a live frame: it carries
	// the header of the frame it stands for (whose Origin and Seq find its
	// body), and no body.
	FlagMarker uint8 = 1 << 5
	// FlagCapability marks a capability/grant or capability/revoke
	// envelope: every node that takes it changes the grants of the pod's
	// participants (issue 23), in the pod's order.
	FlagCapability uint8 = 1 << 6
	// FlagCall marks an envelope of a call the gateway keeps track of
	// (docs/protocol.md section 11): an mcp/request that waits for an
	// answer, an mcp/response, a proposal or a decision on one. Every node
	// that takes it reads its kind and correlation, in the pod's order.
	FlagCall uint8 = 1 << 7
)

// The versions of the frame's header. A frame of version 4 carries Via
// after the protocol's span; one of version 5 carries Via (its count 0
// when there is none) and then Trace, 25 bytes; one with neither is
// written as version 2, as before, so that its header costs the history
// index nothing more. (3 is the history's batch of frames,
// history.batchVersion, which a stream message's first byte tells from a
// frame.) A node of a version before 5 drops a frame of version 5 as
// malformed: turn tracing on once every node of a cluster reads it.
const (
	frameVersion      = 2
	frameVersionVia   = 4
	frameVersionTrace = 5
)

// traceSize is the size of a frame's Trace: trace id, span id, flags.
const traceSize = 16 + 8 + 1

func knownVersion(v byte) bool {
	return v == frameVersion || v == frameVersionVia || v == frameVersionTrace
}

// Meta is the header of a frame: what ingress decided about an envelope, so
// that the fan-out decides per recipient without parsing the envelope again.
// Decoded strings point into the frame's bytes.
type Meta struct {
	Kind  FrameKind
	Flags uint8
	// Origin names the gateway node that accepted the envelope.
	Origin string
	// From is the sender's participant id (for presence, the participant
	// the event is about).
	From string
	To   []string
	// ContextID is "" for the main context. ContextType is the type
	// registered when the context was created, whatever this envelope says.
	ContextID   string
	ContextType string
	// ContextParent is the parent the context was registered with, so
	// that other nodes build the same registry from the stream.
	ContextParent string
	// Ancestors are the context's ancestor ids, parent first; subtree
	// filters match against them.
	Ancestors []string
	// Seq numbers the frames its origin node put into pods' logs, in the
	// order it put them (one counter for all pods of the node, so that a
	// pod closed and opened again never numbers anew): a node drops a
	// frame whose number it has already delivered for that origin (one
	// republished after the history stream failed over), and a joiner
	// skips the presence its welcome already reflects. 0 for a
	// system/context event, which several nodes may publish.
	Seq uint64
	// ID is the envelope's id.
	ID string
	// Incarnation is, for a system/context event, the id of the envelope
	// that created the context: it tells which incarnation of a context id
	// concluded.
	Incarnation string
	// Consumes are the ids the envelope's lifecycle consumes.
	Consumes []string

	// Protocol is the span of the protocol string token in the body, which
	// the fan-out rewrites once for participants that speak MCPx.
	Protocol Span

	// Via are, for a capability/grant, the grants it was made through
	// (capability.Grant.Via): the grantor's node alone knows its token's
	// capabilities, so it decides them and every node reads them here.
	Via []string

	// Trace is the span of the node that accepted the envelope, when it
	// traces (docs/protocol.md section 7): the nodes that deliver it
	// continue it, so that one trace shows them all.
	Trace TraceContext
}

// Reset clears m, keeping the capacity of its slices.
func (m *Meta) Reset() {
	to, anc, cons, via := m.To[:0], m.Ancestors[:0], m.Consumes[:0], m.Via[:0]
	*m = Meta{To: to, Ancestors: anc, Consumes: cons, Via: via}
}

// Live reports whether FlagLive is set.
func (m *Meta) Live() bool { return m.Flags&FlagLive != 0 }

// Marker reports whether FlagMarker is set.
func (m *Meta) Marker() bool { return m.Flags&FlagMarker != 0 }

// Transient reports whether FlagTransient is set.
func (m *Meta) Transient() bool { return m.Flags&FlagTransient != 0 }

// Path reports whether FlagPath is set.
func (m *Meta) Path() bool { return m.Flags&FlagPath != 0 }

// Conclusion reports whether FlagConclusion is set.
func (m *Meta) Conclusion() bool { return m.Flags&FlagConclusion != 0 }

// Frame returns the frame of meta and body, in a slice of its own of
// exactly its size.
func Frame(m *Meta, body []byte) []byte {
	return AppendFrame(make([]byte, 0, frameSize(m, body)), m, body)
}

// frameSize is the size of the frame of m and body.
func frameSize(m *Meta, body []byte) int {
	n := 3 + strSize(m.Origin) + strSize(m.From) + uvarintSize(uint64(len(m.To)))
	for _, t := range m.To {
		n += strSize(t)
	}
	n += strSize(m.ContextID) + strSize(m.ContextType) + strSize(m.ContextParent) + uvarintSize(uint64(len(m.Ancestors)))
	for _, a := range m.Ancestors {
		n += strSize(a)
	}
	n += uvarintSize(m.Seq) + strSize(m.ID) + strSize(m.Incarnation) + uvarintSize(uint64(len(m.Consumes)))
	for _, c := range m.Consumes {
		n += strSize(c)
	}
	n += uvarintSize(uint64(m.Protocol.Start)) + uvarintSize(uint64(m.Protocol.End))
	if len(m.Via) > 0 || m.Trace.Valid() {
		n += uvarintSize(uint64(len(m.Via)))
		for _, v := range m.Via {
			n += strSize(v)
		}
	}
	if m.Trace.Valid() {
		n += traceSize
	}
	return n + len(body)
}

func strSize(s string) int { return uvarintSize(uint64(len(s))) + len(s) }

func uvarintSize(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// AppendFrame appends the frame of meta and body to dst.
func AppendFrame(dst []byte, m *Meta, body []byte) []byte {
	version := byte(frameVersion)
	switch {
	case m.Trace.Valid():
		version = frameVersionTrace
	case len(m.Via) > 0:
		version = frameVersionVia
	}
	dst = append(dst, version, byte(m.Kind), m.Flags)
	dst = appendString(dst, m.Origin)
	dst = appendString(dst, m.From)
	dst = binary.AppendUvarint(dst, uint64(len(m.To)))
	for _, t := range m.To {
		dst = appendString(dst, t)
	}
	dst = appendString(dst, m.ContextID)
	dst = appendString(dst, m.ContextType)
	dst = appendString(dst, m.ContextParent)
	dst = binary.AppendUvarint(dst, uint64(len(m.Ancestors)))
	for _, a := range m.Ancestors {
		dst = appendString(dst, a)
	}
	dst = binary.AppendUvarint(dst, m.Seq)
	dst = appendString(dst, m.ID)
	dst = appendString(dst, m.Incarnation)
	dst = binary.AppendUvarint(dst, uint64(len(m.Consumes)))
	for _, c := range m.Consumes {
		dst = appendString(dst, c)
	}
	dst = binary.AppendUvarint(dst, uint64(m.Protocol.Start))
	dst = binary.AppendUvarint(dst, uint64(m.Protocol.End))
	if version != frameVersion {
		dst = binary.AppendUvarint(dst, uint64(len(m.Via)))
		for _, v := range m.Via {
			dst = appendString(dst, v)
		}
	}
	if version == frameVersionTrace {
		dst = append(dst, m.Trace.TraceID[:]...)
		dst = append(dst, m.Trace.SpanID[:]...)
		dst = append(dst, m.Trace.Flags)
	}
	return append(dst, body...)
}

// ErrBadFrame is returned for a frame this gateway did not write.
var ErrBadFrame = errors.New("envelope: malformed frame")

// DecodeFrame reads the header of data into m and returns the body. The
// strings in m share data's memory, so data must not change afterwards.
func DecodeFrame(data []byte, m *Meta) ([]byte, error) {
	body, err := decodeHeader(data, m)
	if err != nil || m.Protocol.End > len(body) {
		return nil, ErrBadFrame
	}
	return body, nil
}

// DecodeHeader reads a frame's header alone (the frame without its body,
// as the history index keeps it) into m. The strings in m share data's
// memory.
func DecodeHeader(head []byte, m *Meta) error {
	_, err := decodeHeader(head, m)
	return err
}

// HeaderID is the envelope id in a frame's header (its memory), or "":
// what the history index keys its entries by, without decoding the rest.
func HeaderID(head []byte) string {
	if len(head) < 3 || !knownVersion(head[0]) {
		return ""
	}
	d := frameDecoder{b: head[3:]}
	d.skip() // origin
	d.skip() // from
	for n := d.uvarint(); n > 0 && d.err == nil; n-- {
		d.skip()
	}
	d.skip() // context id
	d.skip() // type
	d.skip() // parent
	for n := d.uvarint(); n > 0 && d.err == nil; n-- {
		d.skip()
	}
	d.uvarint() // seq
	id := d.string()
	if d.err != nil {
		return ""
	}
	return id
}

func decodeHeader(data []byte, m *Meta) ([]byte, error) {
	m.Reset()
	d := frameDecoder{b: data}
	if len(data) < 3 || !knownVersion(data[0]) {
		return nil, ErrBadFrame
	}
	m.Kind, m.Flags = FrameKind(data[1]), data[2]
	d.b = data[3:]
	m.Origin = d.string()
	m.From = d.string()
	for n := d.uvarint(); n > 0 && d.err == nil; n-- {
		m.To = append(m.To, d.string())
	}
	m.ContextID = d.string()
	m.ContextType = d.string()
	m.ContextParent = d.string()
	for n := d.uvarint(); n > 0 && d.err == nil; n-- {
		m.Ancestors = append(m.Ancestors, d.string())
	}
	m.Seq = d.uvarint()
	m.ID = d.string()
	m.Incarnation = d.string()
	for n := d.uvarint(); n > 0 && d.err == nil; n-- {
		m.Consumes = append(m.Consumes, d.string())
	}
	m.Protocol.Start = int(d.uvarint())
	m.Protocol.End = int(d.uvarint())
	if data[0] == frameVersionVia || data[0] == frameVersionTrace {
		for n := d.uvarint(); n > 0 && d.err == nil; n-- {
			m.Via = append(m.Via, d.string())
		}
	}
	if data[0] == frameVersionTrace {
		if d.err != nil || len(d.b) < traceSize {
			return nil, ErrBadFrame
		}
		copy(m.Trace.TraceID[:], d.b)
		copy(m.Trace.SpanID[:], d.b[16:])
		m.Trace.Flags = d.b[24]
		d.b = d.b[traceSize:]
	}
	if d.err != nil || m.Protocol.Start > m.Protocol.End {
		return nil, ErrBadFrame
	}
	return d.b, nil
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

type frameDecoder struct {
	b   []byte
	err error
}

func (d *frameDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = ErrBadFrame
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *frameDecoder) skip() {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.err = ErrBadFrame
		return
	}
	d.b = d.b[n:]
}

func (d *frameDecoder) string() string {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.err = ErrBadFrame
		return ""
	}
	s := bytesString(d.b[:n])
	d.b = d.b[n:]
	return s
}
