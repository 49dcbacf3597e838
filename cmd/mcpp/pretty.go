package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mcpp/gateway/wire"
)

// printer renders envelopes for people (tail --pretty, history --pretty).
type printer struct {
	color bool
	loc   *time.Location
	// payloadWidth is how many characters of payload are shown.
	payloadWidth int
	ctxs         *contextView
	// shown counts, per context, the envelopes of a folded replay shown
	// so far, to say how many its system/context event left out.
	shown map[string]int64
}

func newPrinter(color bool) *printer {
	return &printer{color: color, loc: time.Local, payloadWidth: 100, ctxs: newContextView(), shown: map[string]int64{}}
}

// view says how an envelope is shown: as it came live, or as the pod's
// history replays it.
type view struct {
	// replayed: it comes from the pod's history (a replay after the
	// welcome, or mcpp history): a collapsed payload is shown as such.
	replayed bool
	// folded: that history is folded (docs/protocol.md section 8): a concluded
	// context is replayed as its conclusions and its system/context
	// event, which says how many of its envelopes were left out.
	folded bool
	// fold: this envelope is the conclusion of a context that history
	// folded: it stands for the whole context, marked as a fold.
	fold bool
}

// contextView remembers the contexts seen so far: their depth and type.
type contextView struct {
	seen map[string]seenContext
}

type seenContext struct {
	depth int
	typ   string
}

// maxSeen bounds the memory of a long tail; the view starts over when it
// is reached (depths are then guessed again from what follows).
const maxSeen = 100000

func newContextView() *contextView { return &contextView{seen: map[string]seenContext{}} }

// resolve returns the context's label (id, and type when known) and its
// depth: a path of n segments has depth n; an object context has its
// parent's depth plus one, a parent not seen counting as a root (depth 1);
// a root has depth 1.
func (v *contextView) resolve(raw json.RawMessage) (id, typ string, depth int, ok bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", "", 0, false
	}
	if len(v.seen) >= maxSeen {
		clear(v.seen)
	}
	var path string
	if json.Unmarshal(raw, &path) == nil {
		depth = strings.Count(path, "/") + 1
		if s, ok := v.seen[path]; ok {
			typ = s.typ
		}
		v.seen[path] = seenContext{depth: depth, typ: typ}
		return path, typ, depth, true
	}
	var c wire.Context
	if json.Unmarshal(raw, &c) != nil {
		return string(raw), "", 1, true
	}
	prev, known := v.seen[c.ID]
	switch {
	case known && c.Parent == "":
		depth = prev.depth // the parent was fixed at creation; later envelopes may omit it
	case c.Parent != "":
		if p, ok := v.seen[c.Parent]; ok {
			depth = p.depth + 1
		} else {
			depth = 2 // an unknown parent counts as a root
		}
	default:
		depth = 1
	}
	typ = c.Type
	if typ == "" && known {
		typ = prev.typ // so was the type
	}
	v.seen[c.ID] = seenContext{depth: depth, typ: typ}
	return c.ID, typ, depth, true
}

// viewEnvelope is what the pretty view reads of an envelope.
type viewEnvelope struct {
	TS        string          `json:"ts"`
	From      string          `json:"from"`
	To        json.RawMessage `json:"to"`
	Kind      string          `json:"kind"`
	Context   json.RawMessage `json:"context"`
	Payload   json.RawMessage `json:"payload"`
	Lifecycle json.RawMessage `json:"lifecycle"`
}

// ANSI SGR codes.
const (
	sgrDim    = "2"
	sgrBold   = "1"
	sgrRed    = "31"
	sgrYellow = "33"
	sgrCyan   = "36"
)

var senderColors = []string{"32", "34", "35", "92", "93", "94", "95", "96"}

func (p *printer) paint(sgr, s string) string {
	if !p.color || s == "" {
		return s
	}
	return "\x1b[" + sgr + "m" + s + "\x1b[0m"
}

// pad pads s with spaces to width characters (at least one space after).
func pad(s string, width int) string {
	n := utf8.RuneCountInString(s)
	if n >= width {
		return s + " "
	}
	return s + strings.Repeat(" ", width-n)
}

// format renders one envelope on one line; received is the time shown
// when the envelope has no readable ts.
func (p *printer) format(line []byte, received time.Time) string {
	return p.formatView(line, received, view{})
}

// formatView renders one envelope on one line, as vw says.
func (p *printer) formatView(line []byte, received time.Time, vw view) string {
	var v viewEnvelope
	if json.Unmarshal(line, &v) != nil {
		return string(line)
	}
	t, err := time.Parse(time.RFC3339Nano, v.TS)
	if err != nil {
		t = received
	}
	var b strings.Builder
	b.WriteString(p.paint(sgrDim, t.In(p.loc).Format("15:04:05.000")))
	b.WriteByte(' ')

	sender := v.From
	var to []string
	if json.Unmarshal(v.To, &to) == nil && len(to) > 0 {
		sender += "→" + strings.Join(to, ",")
	}
	b.WriteString(p.paint(p.senderColor(v.From), pad(sender, 16)))

	kindColor := sgrBold
	switch {
	case v.Kind == "system/error":
		kindColor = sgrRed
	case strings.HasPrefix(v.Kind, "system/"):
		kindColor = sgrYellow
	}
	b.WriteString(p.paint(kindColor, pad(v.Kind, 22)))

	ctxID := ""
	if id, typ, depth, ok := p.ctxs.resolve(v.Context); ok {
		ctxID = id
		label := "[" + id
		if typ != "" {
			label += " " + typ
		}
		label += "]"
		b.WriteString(strings.Repeat("  ", depth-1))
		b.WriteString(p.paint(sgrCyan, label))
		b.WriteByte(' ')
	}
	switch {
	case vw.replayed && p.collapsed(&v, &b):
	case vw.replayed && vw.folded && v.Kind == wire.KindContext:
		b.WriteString(p.summary(&v))
		var ev wire.ContextEvent
		if json.Unmarshal(v.Payload, &ev) == nil {
			if left := ev.Stats.Messages - p.shown[ctxID]; left > 0 {
				b.WriteString(p.paint(sgrCyan, fmt.Sprintf(" ⤶ folded: %d of its envelopes left out", left)))
			}
		}
		delete(p.shown, ctxID)
	case vw.fold:
		b.WriteString(p.paint(sgrCyan, "⤶ fold "))
		b.WriteString(p.summary(&v))
	default:
		b.WriteString(p.summary(&v))
	}
	if vw.replayed && vw.folded && ctxID != "" && v.Kind != wire.KindContext {
		if len(p.shown) >= maxSeen {
			clear(p.shown)
		}
		p.shown[ctxID]++
	}
	return strings.TrimRight(b.String(), " ")
}

// collapsed writes the summary of a consumed transient envelope that history
// replays collapsed (docs/protocol.md section 8), and reports whether it was
// one.
func (p *printer) collapsed(v *viewEnvelope, b *strings.Builder) bool {
	var lc wire.Lifecycle
	if len(v.Lifecycle) == 0 || json.Unmarshal(v.Lifecycle, &lc) != nil || lc.Mode != wire.ModeTransient {
		return false
	}
	c, ok := wire.IsCollapsed(v.Payload)
	if !ok {
		return false
	}
	b.WriteString(p.paint(sgrDim, "⊟ collapsed, consumed by "+c.ConsumedBy+": "))
	b.WriteString(truncate(c.Summary, p.payloadWidth))
	return true
}

func (p *printer) senderColor(from string) string {
	if strings.HasPrefix(from, "system:") {
		return sgrYellow
	}
	h := fnv.New32a()
	_, _ = io.WriteString(h, from)
	return senderColors[h.Sum32()%uint32(len(senderColors))]
}

// summary is a short form of the payload: gateway messages in words,
// others as compact JSON, cut at payloadWidth characters.
func (p *printer) summary(v *viewEnvelope) string {
	s := ""
	switch v.Kind {
	case wire.KindWelcome:
		var w wire.Welcome
		if json.Unmarshal(v.Payload, &w) == nil {
			ids := make([]string, len(w.Participants))
			for i, o := range w.Participants {
				ids[i] = o.ID
			}
			s = fmt.Sprintf("you are %s in pod %s; %d others", w.You.ID, w.Pod, len(ids))
			if len(ids) > 0 {
				s += ": " + strings.Join(ids, ", ")
			}
			s += historySummary(w.History)
		}
	case wire.KindPresence:
		var pr wire.Presence
		if json.Unmarshal(v.Payload, &pr) == nil {
			s = pr.Event + " " + pr.Participant.ID
		}
	case wire.KindError:
		var ge wire.ErrorPayload
		if json.Unmarshal(v.Payload, &ge) == nil {
			return p.paint(sgrRed, truncate(ge.String(), p.payloadWidth*2))
		}
	case wire.KindContext:
		var c wire.ContextEvent
		if json.Unmarshal(v.Payload, &c) == nil {
			s = fmt.Sprintf("%s (%s): %d messages from %d participants", c.Event, c.Reason, c.Stats.Messages, len(c.Stats.Participants))
		}
	}
	if s != "" {
		return truncate(s, p.payloadWidth*2)
	}
	if len(v.Payload) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if json.Compact(&buf, v.Payload) != nil {
		buf.Reset()
		buf.Write(v.Payload)
	}
	return truncate(buf.String(), p.payloadWidth)
}

// truncate cuts s to n characters, marking the cut with "…".
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// historySummary says what history follows a welcome (docs/protocol.md
// section 8).
func historySummary(h *wire.HistoryInfo) string {
	if h == nil {
		return ""
	}
	n := func(k int, what string) string {
		if k == 1 {
			return "1 " + what
		}
		return fmt.Sprintf("%d %ss", k, what)
	}
	switch {
	case h.Resumed != nil && *h.Resumed:
		return "; resumed: " + n(h.Replayed, "missed envelope") + " follow"
	case h.Resumed != nil && h.Replayed == 0:
		return "; could not resume: envelopes may be missing"
	case h.Resumed != nil:
		return "; could not resume (envelopes may be missing): " + n(h.Replayed, "envelope") + " of history follow"
	}
	s := "; " + n(h.Replayed, "envelope") + " of history follow"
	if h.Folded != nil {
		s += fmt.Sprintf(", folded (%d left out, %d collapsed)", *h.Folded, deref0(h.Collapsed))
	} else {
		s += ", unfolded"
	}
	return s
}

func deref0(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}
