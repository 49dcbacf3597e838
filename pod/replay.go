package pod

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/filter"
	"github.com/mcpp/gateway/history"
	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/wire"
)

// HistoryWant is what a joiner asked of the pod's past at the upgrade
// (docs/protocol.md section 8): history=N|all|tokens:N, fold=0,
// resume=ID.
type HistoryWant struct {
	N      int // 0: none; -1: all
	Tokens int // history=tokens:N: the newest stretch that fits N tokens (N is 0 then)
	Fold   bool
	Resume string
}

func (w HistoryWant) asked() bool { return w.N != 0 || w.Tokens != 0 || w.Resume != "" }

// ParseHistoryWant reads history=, fold= and resume= from an upgrade's
// query. A value that does not parse is refused like a filter parameter
// (400 invalid_filter).
func ParseHistoryWant(q url.Values) (HistoryWant, error) {
	w := HistoryWant{Fold: true}
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
			w.N = -1
		} else if t, ok := strings.CutPrefix(v, "tokens:"); ok {
			n, err := strconv.ParseInt(t, 10, 32)
			if err != nil || n < 1 || t[0] == '+' {
				return w, fmt.Errorf("history=tokens:N takes N from 1 to %d, not %q", math.MaxInt32, t)
			}
			w.Tokens = int(n)
		} else if n, err := strconv.Atoi(v); err == nil && n > 0 && v[0] != '+' {
			w.N = n
		} else {
			return w, fmt.Errorf(`history must be a positive number, "all" or "tokens:N", not %q`, v)
		}
	}
	if v, ok, err := one("fold"); err != nil {
		return w, err
	} else if ok {
		switch v {
		case "0", "false":
			w.Fold = false
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
		w.Resume = v
	}
	return w, nil
}

// replayFor decides what r receives of the pod's past: the welcome's
// history object (docs/protocol.md section 8), and the replay (nil when
// nothing is replayed). Call it with Pod.mu held.
func (p *Pod) replayFor(r *participant.Participant, want HistoryWant) (*wire.HistoryInfo, *replay) {
	if !want.asked() {
		return nil, nil
	}
	info := &wire.HistoryInfo{}
	if p.index == nil {
		// History is off: the join succeeds and nothing is replayed.
		if want.Resume != "" {
			info.Resumed = new(bool)
		}
		if want.N != 0 || want.Tokens != 0 {
			info.Folded, info.Collapsed = new(int), new(int)
		}
		if want.Tokens != 0 {
			info.Omitted, info.Tokens = new(int), new(int)
		}
		return info, nil
	}
	f := r.Filter()
	var sel history.Selection
	resumed := false
	if want.Resume != "" {
		// What it would have received had it stayed: its filter with its
		// echo, unfolded and uncollapsed.
		sel, resumed = p.index.After(want.Resume, func(m *envelope.Meta) bool { return f.Admits(m, r.ID) })
		info.Resumed = &resumed
	}
	admitPast := func(m *envelope.Meta) bool { return f.AdmitsPast(m, r.ID) }
	switch {
	case resumed:
	case want.Tokens != 0:
		// The newest stretch of the folded history that fits the budget,
		// never an envelope split, and what it left out (section 8).
		sel = p.index.NewestWithin(want.Tokens, want.Fold, admitPast)
		info.Folded, info.Collapsed = &sel.Folded, &sel.Collapsed
		info.Omitted, info.Tokens = &sel.Omitted, &sel.Tokens
	case want.N != 0:
		n := want.N
		if n < 0 || n > p.node.Config.History {
			n = p.node.Config.History
		}
		sel = p.index.Newest(n, want.Fold, admitPast)
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

// ReadTimeout bounds one read of history from the stream (a replay's
// chunk, a page). As long as a pod's opening may read its past: on a
// loaded node (a thousand members joining at once, issue 38's full-size
// run) 10 s interrupted 969 replays, each then read again from where it
// stopped, which only added to the load.
const ReadTimeout = 30 * time.Second

// Next implements participant.Source.
func (s *replay) Next(dst [][]byte, max, maxBytes int) ([][]byte, error) {
	if s.first != nil {
		dst = append(dst, s.first)
		s.first = nil
		return dst, nil
	}
	n, size := 0, 0
	for n < len(s.sel) && n < max && (n == 0 || size+s.sel[n].Size <= maxBytes) {
		size += s.sel[n].Size
		n++
	}
	chunk := s.sel[:n]
	ctx, cancel := context.WithTimeout(context.Background(), ReadTimeout)
	defer cancel()
	done, err := s.p.Render(ctx, s.r.Protocol, chunk, func(b []byte) { dst = append(dst, b) })
	var missing *EntryGoneError
	switch {
	case errors.As(err, &missing) && !s.resume:
		// Discarded by --history-bytes or --history-age since the welcome
		// counted it: a joiner's history is the newest there is.
		p := s.p
		p.node.Log.Info("a history entry expired during a replay", "pod", p.Name, "participant", s.r.ID, "position", missing.Pos)
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

// EntryGoneError is returned by Render when a selected entry is no longer
// in the history stream (discarded by a limit since it was selected, or
// never stored): the ones before it were rendered.
type EntryGoneError struct{ Pos uint64 }

func (e *EntryGoneError) Error() string {
	return fmt.Sprintf("pod: the history entry at %d is no longer in the stream", e.Pos)
}

// Render reads the selected entries of the pod's history, oldest first,
// and hands each to fn as a replay sends it: in the reader's protocol,
// collapsed when consumed. It returns how many it handed. An entry the
// stream has not stored yet (the node orders the pod and writes behind)
// is taken from the index, which holds its frame until then: a reader
// never waits for the stream.
func (p *Pod) Render(ctx context.Context, protocol string, sel []history.Selected, fn func([]byte)) (int, error) {
	if len(sel) == 0 {
		return 0, nil
	}
	locs := p.index.Locations(sel)
	// Each stream message once, in the stream's order; a batch may hold
	// several of the entries.
	seqs := make([]uint64, 0, len(locs))
	for _, l := range locs {
		if l.Seq != 0 {
			seqs = append(seqs, l.Seq)
		}
	}
	slices.Sort(seqs)
	seqs = slices.Compact(seqs)
	msgs := make(map[uint64][]byte, len(seqs))
	for len(seqs) > 0 {
		err := p.node.History.Read(ctx, p.subject, seqs, func(m history.StoredMsg) error {
			msgs[m.Seq] = m.Data
			return nil
		})
		var missing *history.MissingError
		if !errors.As(err, &missing) {
			if err != nil {
				return 0, err
			}
			break
		}
		// Read the others; the entries in the missing one are missing.
		i, _ := slices.BinarySearch(seqs, missing.Seq)
		seqs = seqs[min(i+1, len(seqs)):]
	}
	var m envelope.Meta
	for i, l := range locs {
		frame := l.Frame
		if frame == nil {
			data, ok := msgs[l.Seq]
			if !ok {
				return i, &EntryGoneError{Pos: sel[i].Pos}
			}
			var err error
			if frame, err = history.Frame(data, l.Off); err != nil {
				return i, err
			}
		}
		body, err := envelope.DecodeFrame(frame, &m)
		if err != nil {
			return i, err
		}
		if protocol == wire.ProtocolMCPX {
			body = asMCPX(body, m.Protocol)
		}
		if by := sel[i].ConsumedBy; by != "" {
			body = history.Collapse(body, by)
		}
		fn(body)
	}
	return len(sel), nil
}

// RawHistory is the payload of system/history as the gateway writes it
// (docs/protocol.md section 6): each envelope's bytes as a replay sends
// them, never decoded and encoded again.
type RawHistory = wire.HistoryAnswerOf[json.RawMessage]

// HistoryPage answers gateway/history for a reader with filter f: the
// entries its filter admits (its own envelopes too, whatever its echo),
// as a replay sends them.
func (p *Pod) HistoryPage(q history.PageQuery, f *filter.Filter, self, protocol string) (*RawHistory, *envelope.Error) {
	answer := &RawHistory{Envelopes: []json.RawMessage{}}
	if p.index == nil {
		return answer, nil // history is off
	}
	sel, ok := p.index.Page(q, func(m *envelope.Meta) bool { return f.AdmitsPast(m, self) })
	if !ok {
		return nil, unknownBound(q)
	}
	ctx, cancel := context.WithTimeout(context.Background(), ReadTimeout)
	defer cancel()
	n, err := p.Render(ctx, protocol, sel.Entries, func(b []byte) { answer.Envelopes = append(answer.Envelopes, b) })
	for _, e := range sel.Entries[:n] {
		answer.Tokens += e.Tokens
	}
	answer.More = sel.More
	if err != nil {
		// An entry expired since the index chose it, or the stream did not
		// answer: the page is what could be read, oldest first, and says
		// that there is more to ask for.
		var missing *EntryGoneError
		if !errors.As(err, &missing) {
			p.node.Log.Error("reading history", "pod", p.Name, "err", err)
		}
		answer.More = true
	}
	return answer, nil
}

// CheckBound refuses a gateway/history query whose before or after names
// an id the pod's history does not hold (invalid_envelope): a page of no
// entries finds out at the cost of one lookup, before the request takes
// its place after rate_limited (docs/protocol.md section 6). With history
// off any id is fine, and the answer empty.
func (p *Pod) CheckBound(q history.PageQuery) *envelope.Error {
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
