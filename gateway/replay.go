package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/filter"
	"github.com/mcpp/gateway/history"
	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/wire"
)

// historyWant is what a joiner asked of the pod's past at the upgrade
// (docs/protocol.md section 8): history=N|all, fold=0, resume=ID.
type historyWant struct {
	n      int // 0: none; -1: all
	fold   bool
	resume string
}

func (w historyWant) asked() bool { return w.n != 0 || w.resume != "" }

// parseHistoryWant reads history=, fold= and resume= from an upgrade's
// query. A value that does not parse is refused like a filter parameter
// (400 invalid_filter).
func parseHistoryWant(q url.Values) (historyWant, error) {
	w := historyWant{fold: true}
	one := func(name string) (string, bool, error) {
		vs, ok := q[name]
		if !ok {
			return "", false, nil
		}
		if len(vs) != 1 {
			return "", false, fmt.Errorf("%s is given %d times", name, len(vs))
		}
		return vs[0], true, nil
	}
	if v, ok, err := one("history"); err != nil {
		return w, err
	} else if ok {
		if v == "all" {
			w.n = -1
		} else if n, err := strconv.Atoi(v); err == nil && n > 0 {
			w.n = n
		} else {
			return w, fmt.Errorf(`history must be a positive number or "all", not %q`, v)
		}
	}
	if v, ok, err := one("fold"); err != nil {
		return w, err
	} else if ok {
		switch v {
		case "0", "false":
			w.fold = false
		case "1", "true":
		default:
			return w, fmt.Errorf("fold must be 0 or 1, not %q", v)
		}
	}
	if v, ok, err := one("resume"); err != nil {
		return w, err
	} else if ok {
		if len(v) == 0 || len(v) > envelope.MaxIDBytes {
			return w, fmt.Errorf("resume must be an envelope id of 1 to %d bytes", envelope.MaxIDBytes)
		}
		w.resume = v
	}
	return w, nil
}

// replayFor decides, with the fan-out paused, what r receives of the
// pod's past: the welcome's history object (docs/protocol.md section 8),
// and the replay (nil when nothing is replayed).
func (p *Pod) replayFor(r *participant.Participant, want historyWant) (*wire.HistoryInfo, *replay) {
	if !want.asked() {
		return nil, nil
	}
	info := &wire.HistoryInfo{}
	if p.index == nil {
		// History is off: the join succeeds and nothing is replayed.
		if want.resume != "" {
			info.Resumed = new(bool)
		}
		if want.n != 0 {
			info.Folded, info.Collapsed = new(int), new(int)
		}
		return info, nil
	}
	f := r.Filter()
	var sel history.Selection
	resumed := false
	if want.resume != "" {
		// What it would have received had it stayed: its filter with its
		// echo, unfolded and uncollapsed.
		sel, resumed = p.index.After(want.resume, func(m *envelope.Meta) bool { return f.Admits(m, r.ID) })
		info.Resumed = &resumed
	}
	if !resumed && want.n != 0 {
		n := want.n
		if n > p.gw.cfg.History {
			n = p.gw.cfg.History
		}
		sel = p.index.Newest(n, want.fold, func(m *envelope.Meta) bool { return f.AdmitsPast(m, r.ID) })
		info.Folded, info.Collapsed = &sel.Folded, &sel.Collapsed
	}
	info.Replayed = len(sel.Entries)
	if len(sel.Entries) == 0 {
		return info, nil
	}
	return info, &replay{p: p, r: r, sel: sel.Entries, resume: resumed}
}

// replay is a joiner's welcome and replay: it reads the selected entries
// from the stream as the connection takes them, so that a long replay
// never sits in memory whole.
type replay struct {
	p      *Pod
	r      *participant.Participant
	first  []byte // the welcome
	sel    []history.Selected
	resume bool
}

// replayReadTimeout bounds one read of a replay from the stream.
const replayReadTimeout = 10 * time.Second

// Next implements participant.Source.
func (s *replay) Next(dst [][]byte, max, maxBytes int) ([][]byte, error) {
	if s.first != nil {
		dst = append(dst, participant.TextFrame(s.first))
		s.first = nil
		return dst, nil
	}
	n, size := 0, 0
	for n < len(s.sel) && n < max && (n == 0 || size+s.sel[n].Size <= maxBytes) {
		size += s.sel[n].Size
		n++
	}
	chunk := s.sel[:n]
	start := len(dst)
	ctx, cancel := context.WithTimeout(context.Background(), replayReadTimeout)
	defer cancel()
	err := s.p.render(ctx, s.r.Protocol, chunk, func(b []byte) { dst = append(dst, participant.TextFrame(b)) })
	done := len(dst) - start
	var missing *history.MissingError
	switch {
	case errors.As(err, &missing) && !s.resume:
		// Discarded by --history-bytes or --history-age since the welcome
		// counted it: a joiner's history is the newest there is.
		p := s.p
		p.gw.log.Info("a history entry expired during a replay", "pod", p.Name, "participant", s.r.ID, "seq", missing.Seq)
		s.sel = s.sel[done+1:]
		return dst, nil
	case err != nil:
		// A resume that cannot be whole is not given half: the
		// participant reconnects and resumes again, or learns it has a
		// gap.
		return dst, fmt.Errorf("replay interrupted (%v); resume again", err)
	}
	s.sel = s.sel[n:]
	return dst, nil
}

// render reads the selected entries of the pod's history, oldest first, and
// hands each to fn as a replay sends it: in the reader's protocol,
// collapsed when consumed.
func (p *Pod) render(ctx context.Context, protocol string, sel []history.Selected, fn func([]byte)) error {
	if len(sel) == 0 {
		return nil
	}
	seqs := make([]uint64, len(sel))
	for i, e := range sel {
		seqs[i] = e.Seq
	}
	i := 0
	var m envelope.Meta
	return p.gw.store().Read(ctx, p.subject, seqs, func(msg history.Msg) error {
		body, err := envelope.DecodeFrame(msg.Data, &m)
		if err != nil {
			return err
		}
		if protocol == envelope.ProtocolMCPX {
			body = asMCPX(body, m.Protocol)
		}
		if by := sel[i].ConsumedBy; by != "" {
			body = history.Collapse(body, by)
		}
		i++
		fn(body)
		return nil
	})
}

// rawHistory is the payload of system/history as the gateway writes it
// (docs/protocol.md section 6): each envelope's bytes as a replay sends
// them, never decoded and encoded again.
type rawHistory = wire.HistoryAnswerOf[json.RawMessage]

// historyPage answers gateway/history for a reader with filter f: the
// entries its filter admits (its own envelopes too, whatever its echo),
// as a replay sends them.
func (p *Pod) historyPage(q history.PageQuery, f *filter.Filter, self, protocol string) (*rawHistory, *envelope.Error) {
	answer := &rawHistory{Envelopes: []json.RawMessage{}}
	if p.index == nil {
		return answer, nil // history is off
	}
	sel, ok := p.index.Page(q, func(m *envelope.Meta) bool { return f.AdmitsPast(m, self) })
	if !ok {
		return nil, unknownBound(q)
	}
	ctx, cancel := context.WithTimeout(context.Background(), replayReadTimeout)
	defer cancel()
	err := p.render(ctx, protocol, sel.Entries, func(b []byte) { answer.Envelopes = append(answer.Envelopes, b) })
	answer.More = sel.More
	if err != nil {
		// An entry expired since the index chose it, or the stream did not
		// answer: the page is what could be read, oldest first, and says
		// that there is more to ask for.
		var missing *history.MissingError
		if !errors.As(err, &missing) {
			p.gw.log.Error("reading history", "pod", p.Name, "err", err)
		}
		answer.More = true
	}
	return answer, nil
}

// checkBound refuses a gateway/history query whose before or after names
// an id the pod's history does not hold (invalid_envelope): a page of no
// entries finds out at the cost of one lookup, before the request takes
// its place after rate_limited (docs/protocol.md section 6). With history
// off any id is fine, and the answer empty.
func (p *Pod) checkBound(q history.PageQuery) *envelope.Error {
	if p.index == nil || (q.Before == "" && q.After == "") {
		return nil
	}
	probe := history.PageQuery{Before: q.Before, After: q.After} // Limit 0: stops at the first entry
	if _, ok := p.index.Page(probe, func(*envelope.Meta) bool { return true }); !ok {
		return unknownBound(q)
	}
	return nil
}

// unknownBound is the refusal of a gateway/history query whose before or
// after the pod's history does not hold.
func unknownBound(q history.PageQuery) *envelope.Error {
	id := q.Before
	if id == "" {
		id = q.After
	}
	return envelope.Errorf(wire.CodeInvalidEnvelope, "the pod's history holds no envelope %q (it expired, or was never there)", id)
}
