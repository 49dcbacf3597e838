package integration

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// The checker of the cluster's fault suite (faults_cluster_test.go), in
// the manner of Jepsen's: it reads what every client received against
// what every sender was told, and reports, per sender, what was lost,
// duplicated or reordered.
//
// A sender's envelope is acknowledged when its sender was told it was
// accepted: its echo came back on the connection it was sent on (echo=1),
// or the HTTP publish answered it with its id. Then it is stored in the
// history with a quorum, and must reach every member whose filter admits
// it, once, in its sender's order. An envelope refused (a system/error, or
// an error entry of the publish answer) must never reach anyone. One
// whose outcome the sender never learnt (its connection dropped first, a
// publish that did not answer) may reach the members or not, but never
// twice; it has no place in its sender's order, as Jepsen's indeterminate
// operations have none.
//
// The members join with history=all and resume after every drop, so each
// must have received, from the pod's start, every acknowledged envelope
// its filter admits.

// outcome is what a sender was told of one of its envelopes.
type outcome uint8

const (
	outcomePending outcome = iota // sent, nothing heard yet (indeterminate at the end)
	outcomeAcked
	outcomeRefused
)

// sentEnvelope is one envelope a sender sent: its number, whether it went
// to the side context (which filtered members do not receive), and what
// the sender was told.
type sentEnvelope struct {
	n       int
	side    bool
	outcome outcome
	code    string // the refusal's code
	// node is the node it was sent to (1-based), sent and told when it
	// was sent and answered: what a lost one's report says.
	node       int
	sent, told time.Time
}

// ledger is what the senders of the whole run sent and were told, and
// what every member received: the checker's input.
type ledger struct {
	mu   sync.Mutex
	sent map[string]map[string][]sentEnvelope // pod → sender → by n
	// streams are what each member received, in order: each stream
	// starts with a join that replayed the pod's whole history (not a
	// resume), so the last one must hold everything.
	streams  map[string]map[string][][]received // pod → member → streams
	filtered map[string]map[string]bool         // pod → member → takes the main context only
}

// received is one envelope a member received.
type received struct {
	from string
	n    int
}

func newLedger() *ledger {
	return &ledger{sent: map[string]map[string][]sentEnvelope{}, streams: map[string]map[string][][]received{}, filtered: map[string]map[string]bool{}}
}

// send records that sender sent its envelope n (they are numbered from 0,
// one after another).
func (l *ledger) send(pod, sender string, n int, side bool, node int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sent[pod] == nil {
		l.sent[pod] = map[string][]sentEnvelope{}
	}
	s := l.sent[pod][sender]
	if n != len(s) {
		panic(fmt.Sprintf("%s/%s: envelope %d sent after %d", pod, sender, n, len(s)))
	}
	l.sent[pod][sender] = append(s, sentEnvelope{n: n, side: side, node: node + 1, sent: time.Now()})
}

// tell records what sender was told of its envelope n. An answer never
// changes once given.
func (l *ledger) tell(pod, sender string, n int, o outcome, code string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sent[pod][sender]
	if n < len(s) && s[n].outcome == outcomePending {
		s[n].outcome, s[n].code, s[n].told = o, code, time.Now()
	}
}

// member records that a member takes part (filtered: it takes the main
// context only).
func (l *ledger) member(pod, id string, filtered bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.streams[pod] == nil {
		l.streams[pod], l.filtered[pod] = map[string][][]received{}, map[string]bool{}
	}
	l.filtered[pod][id] = filtered
}

// fresh starts a new stream of what member receives: its join replays the
// pod from its start.
func (l *ledger) fresh(pod, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.streams[pod][id] = append(l.streams[pod][id], nil)
}

// receive records that member received sender's envelope n.
func (l *ledger) receive(pod, id, from string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ss := l.streams[pod][id]
	if len(ss) == 0 {
		ss = append(ss, nil)
	}
	ss[len(ss)-1] = append(ss[len(ss)-1], received{from, n})
	l.streams[pod][id] = ss
}

// report is the checker's verdict.
type report struct {
	Seed                 int64
	Acked, Refused, Open int // envelopes acknowledged, refused, never answered
	Deliveries           int // of envelopes, to members
	Lost                 []string
	// HistoryLacks are the acknowledged envelopes the histories lack
	// (pod, sender, n): the suite asks the stream itself for them, so
	// that a node's index that lacks one is told from a stream that does.
	HistoryLacks []lackedEnvelope
	// AckedAfterHistory counts the envelopes acknowledged only after the
	// histories were read (their senders' nodes held them that long).
	AckedAfterHistory int
	Duplicated        []string
	Reordered         []string
	RefusedDelivered  []string
	NotAdmitted       []string // delivered to a member whose filter does not admit it
}

func (r *report) ok() bool {
	return len(r.Lost)+len(r.Duplicated)+len(r.Reordered)+len(r.RefusedDelivered)+len(r.NotAdmitted) == 0
}

func (r *report) String() string {
	var b strings.Builder
	// A history that lacks an envelope is a loss of the stream's; a member
	// that lacks one the history holds, of the delivery: the histories'
	// lines come first, and are counted apart.
	histories := 0
	slices.SortStableFunc(r.Lost, func(a, b string) int {
		ha, hb := strings.Contains(a, ": the history "), strings.Contains(b, ": the history ")
		switch {
		case ha && !hb:
			return -1
		case hb && !ha:
			return 1
		}
		return 0
	})
	for _, l := range r.Lost {
		if strings.Contains(l, ": the history ") {
			histories++
		}
	}
	fmt.Fprintf(&b, "seed %d: %d acknowledged (%d only after the histories were read), %d refused, %d never answered; %d deliveries; lost %d (streams lacking acknowledged envelopes, of which %d pods' histories), duplicated %d, reordered %d, refused but delivered %d, delivered against the filter %d",
		r.Seed, r.Acked, r.AckedAfterHistory, r.Refused, r.Open, r.Deliveries, len(r.Lost), histories, len(r.Duplicated), len(r.Reordered), len(r.RefusedDelivered), len(r.NotAdmitted))
	for _, list := range []struct {
		name  string
		items []string
	}{{"lost", r.Lost}, {"duplicated", r.Duplicated}, {"reordered", r.Reordered}, {"refused but delivered", r.RefusedDelivered}, {"against the filter", r.NotAdmitted}} {
		for i, s := range list.items {
			if i == 20 {
				fmt.Fprintf(&b, "\n  %s: … %d more", list.name, len(list.items)-20)
				break
			}
			fmt.Fprintf(&b, "\n  %s: %s", list.name, s)
		}
	}
	return b.String()
}

// check reads every member's streams against what was sent and told.
// history, when not nil, is each pod's history read at the end, as one
// more stream that must hold every acknowledged envelope (unfiltered).
func (l *ledger) check(seed int64, history map[string][]received, historyAt time.Time) *report {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := &report{Seed: seed}
	pods := keys(l.sent)
	for _, pod := range pods {
		for _, s := range l.sent[pod] {
			for _, e := range s {
				switch e.outcome {
				case outcomeAcked:
					r.Acked++
				case outcomeRefused:
					r.Refused++
				default:
					r.Open++
				}
			}
		}
		for _, id := range keys(l.streams[pod]) {
			ss := l.streams[pod][id]
			for i, st := range ss {
				r.Deliveries += len(st)
				who := fmt.Sprintf("%s: %s's stream %d", pod, id, i+1)
				l.checkStream(r, pod, who, st, l.filtered[pod][id], i == len(ss)-1, time.Time{})
			}
		}
		if history != nil {
			before := len(r.Lost)
			l.checkStream(r, pod, pod+": the history", history[pod], false, true, historyAt)
			if len(r.Lost) > before {
				seen := map[received]bool{}
				for _, got := range history[pod] {
					seen[got] = true
				}
				for _, sender := range keys(l.sent[pod]) {
					for _, e := range l.sent[pod][sender] {
						if e.outcome == outcomeAcked && !seen[received{sender, e.n}] && !e.told.After(historyAt) {
							r.HistoryLacks = append(r.HistoryLacks, lackedEnvelope{pod, sender, e.n})
						}
					}
				}
			}
		}
	}
	return r
}

// checkStream checks one stream of what a member received (whole: it must
// hold every acknowledged envelope its filter admits).
func (l *ledger) checkStream(r *report, pod, who string, st []received, filtered, whole bool, asOf time.Time) {
	sent := l.sent[pod]
	seen := map[received]int{}
	lastAcked := map[string]int{} // sender → the highest acknowledged n received so far
	for i, got := range st {
		e, ok := lookup(sent[got.from], got.n)
		if !ok {
			r.Lost = append(r.Lost, fmt.Sprintf("%s received %s/%d, which was never sent", who, got.from, got.n))
			continue
		}
		if first, twice := seen[got]; twice {
			r.Duplicated = append(r.Duplicated, fmt.Sprintf("%s received %s/%d at %d and again at %d", who, got.from, got.n, first, i))
			continue
		}
		seen[got] = i
		switch {
		case e.outcome == outcomeRefused:
			r.RefusedDelivered = append(r.RefusedDelivered, fmt.Sprintf("%s received %s/%d, refused with %s", who, got.from, got.n, e.code))
		case filtered && e.side:
			r.NotAdmitted = append(r.NotAdmitted, fmt.Sprintf("%s (main context only) received %s/%d of the side context", who, got.from, got.n))
		}
		if e.outcome != outcomeAcked {
			continue // indeterminate: no place in its sender's order
		}
		if last, ok := lastAcked[got.from]; ok && got.n < last {
			r.Reordered = append(r.Reordered, fmt.Sprintf("%s received %s/%d after %s/%d", who, got.from, got.n, got.from, last))
		}
		lastAcked[got.from] = max(lastAcked[got.from], got.n)
	}
	if !whole {
		return
	}
	for _, sender := range keys(sent) {
		var missing []int
		for _, e := range sent[sender] {
			if e.outcome == outcomeAcked && !(filtered && e.side) {
				if !asOf.IsZero() && e.told.After(asOf) {
					// Acknowledged after the history was read: perhaps
					// stored after it; looked for in the stream instead.
					r.AckedAfterHistory++
					continue
				}
				if _, ok := seen[received{sender, e.n}]; !ok {
					missing = append(missing, e.n)
				}
			}
		}
		if len(missing) > 0 {
			// Where and when the first few went: to read beside the
			// nodes' logs.
			var where []string
			for _, n := range missing[:min(3, len(missing))] {
				e := sent[sender][n]
				where = append(where, fmt.Sprintf("%d to node %d at %s, acknowledged at %s", n, e.node,
					e.sent.UTC().Format("15:04:05.000"), e.told.UTC().Format("15:04:05.000")))
			}
			r.Lost = append(r.Lost, fmt.Sprintf("%s lacks %d acknowledged envelopes of %s: %s (%s)", who, len(missing), sender, ranges(missing), strings.Join(where, "; ")))
		}
	}
}

// lackedEnvelope is an acknowledged envelope a pod's history lacks.
type lackedEnvelope struct {
	pod, sender string
	n           int
}

// id is the envelope's id, as its sender made it.
func (e lackedEnvelope) id() string { return fmt.Sprintf("%s.%s.%d", e.pod, e.sender, e.n) }

func lookup(s []sentEnvelope, n int) (sentEnvelope, bool) {
	if n < 0 || n >= len(s) {
		return sentEnvelope{}, false
	}
	return s[n], true
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ranges writes sorted numbers as runs: "3-7, 9".
func ranges(ns []int) string {
	ns = slices.Clone(ns)
	slices.Sort(ns)
	var parts []string
	for i := 0; i < len(ns); {
		j := i
		for j+1 < len(ns) && ns[j+1] == ns[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, fmt.Sprint(ns[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", ns[i], ns[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// TestFaultChecker holds the checker to what it must find: a run where
// every member got everything passes; each kind of fault, planted in what
// a member received, is reported, once, naming the sender and envelope.
func TestFaultChecker(t *testing.T) {
	t.Parallel()
	build := func() *ledger {
		l := newLedger()
		for _, id := range []string{"a", "b", "watch"} {
			l.member("p", id, id == "watch")
		}
		for n := range 6 {
			l.send("p", "a", n, n == 2, 0)
			l.tell("p", "a", n, outcomeAcked, "")
		}
		l.send("p", "b", 0, false, 0)
		l.tell("p", "b", 0, outcomeRefused, "no_quorum")
		l.send("p", "b", 1, false, 0) // never answered
		return l
	}
	deliver := func(l *ledger, id string, items ...received) {
		l.fresh("p", id)
		for _, it := range items {
			l.receive("p", id, it.from, it.n)
		}
	}
	all := []received{{"a", 0}, {"a", 1}, {"a", 2}, {"a", 3}, {"a", 4}, {"a", 5}}
	main := []received{{"a", 0}, {"a", 1}, {"a", 3}, {"a", 4}, {"a", 5}}

	l := build()
	deliver(l, "a", all...)
	deliver(l, "b", append(slices.Clone(all), received{"b", 1})...) // the indeterminate one may arrive
	deliver(l, "watch", main...)
	if r := l.check(1, map[string][]received{"p": all}, time.Now()); !r.ok() || r.Acked != 6 || r.Refused != 1 || r.Open != 1 {
		t.Fatalf("a clean run: %v", r)
	}

	for name, c := range map[string]struct {
		b       []received
		history []received
		want    func(*report) []string
	}{
		"lost":             {b: []received{{"a", 0}, {"a", 1}, {"a", 2}, {"a", 4}, {"a", 5}}, want: func(r *report) []string { return r.Lost }},
		"lost in history":  {b: all, history: all[1:], want: func(r *report) []string { return r.Lost }},
		"duplicated":       {b: append(slices.Clone(all), received{"a", 3}), want: func(r *report) []string { return r.Duplicated }},
		"reordered":        {b: []received{{"a", 0}, {"a", 2}, {"a", 1}, {"a", 3}, {"a", 4}, {"a", 5}}, want: func(r *report) []string { return r.Reordered }},
		"refused, arrived": {b: append(slices.Clone(all), received{"b", 0}), want: func(r *report) []string { return r.RefusedDelivered }},
		"never sent":       {b: append(slices.Clone(all), received{"a", 9}), want: func(r *report) []string { return r.Lost }},
	} {
		l := build()
		deliver(l, "a", all...)
		deliver(l, "b", c.b...)
		deliver(l, "watch", main...)
		h := c.history
		if h == nil {
			h = all
		}
		r := l.check(7, map[string][]received{"p": h}, time.Now())
		if got := c.want(r); len(got) != 1 || r.ok() {
			t.Errorf("%s: the checker reported %v", name, r)
		} else if !strings.Contains(r.String(), "seed 7") {
			t.Errorf("%s: the report does not name its seed: %v", name, r)
		}
	}

	// A filtered member given the side context's envelope; an earlier
	// stream cut short is no loss, but its duplicates are.
	l = build()
	deliver(l, "a", all...)
	deliver(l, "b", received{"a", 0}, received{"a", 0})
	deliver(l, "b", all...)
	deliver(l, "watch", all...)
	r := l.check(3, nil, time.Time{})
	if len(r.NotAdmitted) != 1 || len(r.Duplicated) != 1 || len(r.Lost) != 0 {
		t.Fatalf("a filtered member given too much, a stream cut short with a duplicate: %v", r)
	}

	// A history read before the envelopes were acknowledged may lack
	// them: no loss of the history's, counted apart.
	l = build()
	deliver(l, "a", all...)
	deliver(l, "b", all...)
	deliver(l, "watch", main...)
	if r := l.check(4, map[string][]received{"p": all[:2]}, time.Now().Add(-time.Hour)); !r.ok() || r.AckedAfterHistory != 6 {
		t.Fatalf("a history read before the acknowledgements: %v", r)
	}
}

// tally counts the envelopes sent by what their senders were told.
type tally struct{ acked, refused, open int }

func (l *ledger) counts() tally {
	l.mu.Lock()
	defer l.mu.Unlock()
	var c tally
	for _, senders := range l.sent {
		for _, s := range senders {
			for _, e := range s {
				switch e.outcome {
				case outcomeAcked:
					c.acked++
				case outcomeRefused:
					c.refused++
				default:
					c.open++
				}
			}
		}
	}
	return c
}

// refusals counts the refusals by code.
func (l *ledger) refusals() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, senders := range l.sent {
		for _, s := range senders {
			for _, e := range s {
				if e.outcome == outcomeRefused {
					out[e.code]++
				}
			}
		}
	}
	return out
}
